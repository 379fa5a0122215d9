/* lm_train.c — training a language model: the step built once (forward, loss, backward,
 * gradient accumulation, clipping and AdamW), compiled into programs that share the
 * graph's memory, and run step after step with the learning rate written as a runtime
 * value; validation, metrics, checkpoints and exact resumption.
 *
 * Programs (one graph):
 *   step   the last micro-batch of a step: loss, gradients, accumulation, the global
 *          norm, the optimizer's updates and the accumulators' reset
 *   micro  the other micro-batches (with --accum > 1): loss, gradients, accumulation
 *   eval   the loss alone, for validation
 * Accumulation: acc <- acc + grad each micro-batch; the optimizer updates with acc / k;
 * then acc <- 0. The losses printed are means over a step's micro-batches.
 *
 * With several ranks (cfg->dist), src/dist/dp_train.c builds the gradient exchange
 * instead of the accumulators: micro runs every micro-batch, the ranks sum the gradients,
 * and step is the update alone (see there).
 *
 * Loss scaling (f16 by default): the backward pass starts from loss x scale, a runtime
 * state. The update must not run when the scaled gradients overflowed, so it becomes a
 * program of its own, as with ranks: micro adds every micro-batch's gradients into states
 * "<param>.grad_scaled" (with ranks: the grad_sum states hold the sum), `check` measures
 * their global norm, which the host reads, and then either step unscales, clips and
 * updates — or, when that norm is inf or NaN, the step is skipped (`reset` zeroes the
 * sums) and a dynamic scale halves. */
#include "gradus_lm.h"
#include "gradus_dist.h"
#include "dist/dp_train.h"
#include "io/lm_checkpoint.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static gd_status failed(gd_ctx *ctx, const char *what)
{
    char m[1024];
    snprintf(m, sizeof m, "%s", gd_ctx_error(ctx));
    gd_status s = gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : GD_ERR_INVALID;
    return gd_ctx_fail(ctx, s, "%s: %s", what, m[0] ? m : "unknown error");
}

typedef struct trainer {
    gd_ctx *ctx;
    gd_lm_train_config c;    /* with defaults filled */
    gd_graph *g;
    gd_tensor *ids, *targets, *loss, *norm;
    gd_program *step, *micro, *eval;
    /* loss scaling */
    int scaling, dynamic;
    gd_tensor *scale_t, *unscale_t, *raw_norm; /* the scale, its inverse, the scaled gradients' norm */
    gd_program *check, *reset;
    double scale;            /* always a value f32 holds exactly */
    int64_t good, skipped;   /* steps since the scale last changed or a step was skipped; skipped in all */
    int32_t *x, *y;          /* a batch on the host */
    FILE *metrics;
    gd_dp *dp;               /* data parallelism, when cfg->dist */
    double *losses;          /* per micro-batch of a global step, then per validation batch */
} trainer;

static void trainer_free(trainer *t)
{
    gd_program_free(t->step);
    gd_program_free(t->micro);
    gd_program_free(t->eval);
    gd_program_free(t->check);
    gd_program_free(t->reset);
    gd_graph_free(t->g);
    gd_dp_free(t->dp);
    free(t->losses);
    free(t->x);
    if (t->metrics != NULL) fclose(t->metrics);
}

static double schedule(const gd_lm_train_config *c, int64_t step)
{
    if (step < c->warmup) return c->lr * (double)(step + 1) / (double)c->warmup;
    int64_t span = c->steps - c->warmup;
    double frac = span > 1 ? (double)(step - c->warmup) / (double)(span - 1) : 1.0;
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * frac));
}

/* With ranks: the micro program computes the loss and every gradient; the step program
 * only updates, from the summed gradients (src/dist/dp_train.c). */
static gd_status build_dp(trainer *t)
{
    gd_ctx *ctx = t->ctx;
    const gd_lm_train_config *c = &t->c;
    gd_adamw_config oc = {.lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = 1e-8,
                          .weight_decay = c->weight_decay};
    gd_status st = gd_dp_build(t->g, c->dist, c->grad_accum, c->clip, &oc, c->zero1, t->unscale_t, &t->norm, &t->dp);
    if (st != GD_OK) return st;
    int n = gd_dp_grad_count(t->dp);
    if (t->scaling) { /* the summed gradients, the same on every rank: every rank decides alike */
        gd_tensor **sums = calloc((size_t)n + 1, sizeof *sums);
        if (sums == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n; i++) sums[i] = gd_dp_sum(t->dp, i);
        t->raw_norm = gd_global_norm(t->g, n, sums);
        free(sums);
        if ((t->check = gd_compile(t->g, 1, &t->raw_norm, 0)) == NULL) return failed(ctx, "compiling the overflow check");
    }
    gd_tensor **targets = calloc((size_t)n + 1, sizeof *targets);
    if (targets == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    targets[0] = t->loss;
    for (int i = 0; i < n; i++) targets[i + 1] = gd_dp_micro_target(t->dp, i);
    if ((t->micro = gd_compile(t->g, n + 1, targets, 0)) == NULL) st = failed(ctx, "compiling the gradient step");
    free(targets);
    if (st == GD_OK) st = gd_dp_attach(t->dp, t->micro);
    /* the update's own targets, not every update of the graph: device sums are updates of
     * the micro program */
    gd_tensor **upd = calloc((size_t)gd_dp_update_target_cap(t->dp), sizeof *upd);
    if (upd == NULL && st == GD_OK) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    if (st == GD_OK && (t->step = gd_compile(t->g, gd_dp_update_targets(t->dp, t->norm, upd), upd, 0)) == NULL)
        st = failed(ctx, "compiling the update");
    free(upd);
    if (st == GD_OK && (t->eval = gd_compile(t->g, 1, &t->loss, 0)) == NULL) st = failed(ctx, "compiling the evaluation");
    return st;
}

/* With loss scaling, one process (the programs the header comment describes). The update
 * program's targets are the optimizer's outputs, not every update of the graph, so the
 * accumulation into grad_scaled (which needs the forward and backward passes) stays out. */
static gd_status build_scaled(trainer *t)
{
    gd_ctx *ctx = t->ctx;
    const gd_lm_train_config *c = &t->c;
    gd_graph *g = t->g;
    int np = gd_graph_param_count(g);
    gd_tensor **acc = calloc((size_t)np + 1, sizeof *acc), **acc1 = calloc((size_t)np + 1, sizeof *acc1);
    gd_tensor **grads = calloc((size_t)np + 1, sizeof *grads), **zero = calloc((size_t)np + 1, sizeof *zero);
    gd_tensor **upd = calloc(2 * (size_t)np + 2, sizeof *upd); /* norm, the new parameters, the resets */
    gd_status st = GD_OK;
    if (acc == NULL || acc1 == NULL || grads == NULL || zero == NULL || upd == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
        goto done;
    }
    int n = 0;
    for (int i = 0; i < np && st == GD_OK; i++) {
        gd_tensor *p = gd_graph_param(g, i), *gp = gd_grad(g, p);
        if (gp == NULL) continue;
        char name[512];
        snprintf(name, sizeof name, "%s.grad_scaled", gd_tensor_name(p));
        int64_t shape[GD_MAX_DIMS];
        for (int k = 0; k < gd_tensor_ndim(p); k++) shape[k] = gd_tensor_dim(p, k);
        acc[n] = gd_state(g, name, gd_tensor_dtype(p), gd_tensor_ndim(p), shape);
        acc1[n] = gd_assign(acc[n], gd_add(acc[n], gp));
        /* the update reads the state, not acc1: no path back to the forward pass */
        grads[n] = gd_mul(gd_scale(acc[n], 1.0 / (double)c->grad_accum, 0.0), t->unscale_t);
        if (acc1[n] == NULL || grads[n] == NULL || gd_set_grad(g, p, grads[n]) != GD_OK)
            st = failed(ctx, "the scaled gradients");
        n++;
    }
    if (st == GD_OK && n == 0) st = gd_ctx_fail(ctx, GD_ERR_INVALID, "no parameter has a gradient");
    if (st == GD_OK && (t->raw_norm = gd_global_norm(g, n, acc)) == NULL) st = failed(ctx, "the overflow check");
    if (st == GD_OK && (t->norm = gd_label(gd_global_norm(g, n, grads), "grad_norm")) == NULL)
        st = failed(ctx, "the gradient norm");
    gd_adamw_config oc = {.lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = 1e-8,
                          .weight_decay = c->weight_decay, .clip_norm = c->clip, .updated = upd + 1,
                          .grad_norm = t->norm};
    if (st == GD_OK && gd_optimizer_adamw(g, &oc) != GD_OK) st = failed(ctx, "the optimizer");
    int k = 1;
    while (st == GD_OK && upd[k] != NULL) k++;
    /* zeroed by a fill, not by x * 0: a skipped step's sums hold inf or NaN */
    for (int i = 0; i < n && st == GD_OK; i++) {
        int64_t shape[GD_MAX_DIMS];
        for (int d = 0; d < gd_tensor_ndim(acc[i]); d++) shape[d] = gd_tensor_dim(acc[i], d);
        zero[i] = gd_assign(acc[i], gd_zeros(g, gd_tensor_dtype(acc[i]), gd_tensor_ndim(acc[i]), shape));
        if ((upd[k++] = zero[i]) == NULL) st = failed(ctx, "resetting the scaled gradients");
    }
    upd[0] = t->norm;
    acc1[n] = t->loss;
    if (st == GD_OK && (t->micro = gd_compile(g, n + 1, acc1, 0)) == NULL) st = failed(ctx, "compiling the gradient step");
    if (st == GD_OK && (t->check = gd_compile(g, 1, &t->raw_norm, 0)) == NULL)
        st = failed(ctx, "compiling the overflow check");
    if (st == GD_OK && (t->step = gd_compile(g, k, upd, 0)) == NULL) st = failed(ctx, "compiling the update");
    if (st == GD_OK && (t->reset = gd_compile(g, n, zero, 0)) == NULL) st = failed(ctx, "compiling the reset");
    if (st == GD_OK && (t->eval = gd_compile(g, 1, &t->loss, 0)) == NULL) st = failed(ctx, "compiling the evaluation");
done:
    free(acc);
    free(acc1);
    free(grads);
    free(zero);
    free(upd);
    return st;
}

static gd_status build(trainer *t)
{
    gd_ctx *ctx = t->ctx;
    const gd_lm_train_config *c = &t->c;
    gd_graph *g = t->g = gd_graph_new(ctx);
    if (g == NULL) return failed(ctx, "creating the graph");
    int64_t B = c->batch, T = c->seq;
    t->ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T});
    t->targets = gd_input(g, "targets", GD_I32, 2, (int64_t[]){B, T});
    t->loss = gd_lm_forward_loss(g, &c->model, t->ids, t->targets, c->dtype, GD_LM_FLOAT);
    if (t->loss == NULL) return failed(ctx, "building the model");
    gd_tensor *seed = t->loss;
    if (t->scaling) {
        t->scale_t = gd_state(g, "lm.loss_scale", GD_F32, 0, NULL);
        t->unscale_t = gd_state(g, "lm.grad_unscale", GD_F32, 0, NULL);
        if (t->scale_t == NULL || t->unscale_t == NULL || (seed = gd_mul(t->loss, t->scale_t)) == NULL)
            return failed(ctx, "the loss scale");
    }
    if (gd_backward(g, seed) != GD_OK) return failed(ctx, "the backward pass");
    if (c->dist != NULL) return build_dp(t);
    if (t->scaling) return build_scaled(t);

    int np = gd_graph_param_count(g);
    gd_tensor **grads = calloc((size_t)np + 1, sizeof *grads), **acc1 = calloc((size_t)np + 1, sizeof *acc1);
    if (grads == NULL || acc1 == NULL) {
        free(grads);
        free(acc1);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    }
    gd_status st = GD_OK;
    int n = 0;
    for (int i = 0; i < np && st == GD_OK; i++) {
        /* the half gradients as they are (the optimizer reads them so too): no f32 copies */
        gd_tensor *p = gd_graph_param(g, i), *gp = c->grad_accum > 1 ? gd_grad(g, p) : gd_grad_narrow(g, p);
        if (gp == NULL) continue;
        if (c->grad_accum > 1) {
            char name[512];
            snprintf(name, sizeof name, "%s.grad_acc", gd_tensor_name(p));
            int64_t shape[GD_MAX_DIMS];
            for (int k = 0; k < gd_tensor_ndim(p); k++) shape[k] = gd_tensor_dim(p, k);
            gd_tensor *acc = gd_state(g, name, gd_tensor_dtype(p), gd_tensor_ndim(p), shape);
            acc1[n] = gd_assign(acc, gd_add(acc, gp));
            gp = gd_scale(acc1[n], 1.0 / (double)c->grad_accum, 0.0);
            if (gp == NULL || gd_set_grad(g, p, gp) != GD_OK) st = failed(ctx, "gradient accumulation");
        }
        grads[n++] = gp;
    }
    if (st == GD_OK && n == 0) st = gd_ctx_fail(ctx, GD_ERR_INVALID, "no parameter has a gradient");
    if (st == GD_OK && (t->norm = gd_label(gd_global_norm_as(g, n, grads, GD_F32), "grad_norm")) == NULL)
        st = failed(ctx, "the gradient norm");
    gd_adamw_config oc = {.lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = 1e-8,
                          .weight_decay = c->weight_decay, .clip_norm = c->clip, .grad_norm = t->norm};
    if (st == GD_OK && gd_optimizer_adamw(g, &oc) != GD_OK) st = failed(ctx, "the optimizer");
    /* the accumulators' reset, after the optimizer has read them (graph order) */
    for (int i = 0; i < np && st == GD_OK && c->grad_accum > 1; i++) {
        gd_tensor *p = gd_graph_param(g, i);
        char name[512];
        snprintf(name, sizeof name, "%s.grad_acc", gd_tensor_name(p));
        gd_tensor *acc = gd_graph_find(g, name);
        if (acc != NULL && gd_assign(acc, gd_scale(acc, 0.0, 0.0)) == NULL) st = failed(ctx, "gradient accumulation");
    }
    if (st == GD_OK) {
        t->step = gd_compile(g, 2, (gd_tensor *[]){t->loss, t->norm}, GD_COMPILE_UPDATES);
        if (t->step == NULL) st = failed(ctx, "compiling the training step");
    }
    if (st == GD_OK && c->grad_accum > 1) {
        /* the accumulation is an update of its own: its output as a target runs it */
        acc1[n] = t->loss;
        t->micro = gd_compile(g, n + 1, acc1, 0);
        if (t->micro == NULL) st = failed(ctx, "compiling the accumulation step");
    }
    if (st == GD_OK && (t->eval = gd_compile(g, 1, &t->loss, 0)) == NULL) st = failed(ctx, "compiling the evaluation");
    free(grads);
    free(acc1);
    return st;
}

static gd_status run_batch(trainer *t, gd_program *p, int split, gd_data_pos *pos, float *loss)
{
    const gd_lm_train_config *c = &t->c;
    size_t n = (size_t)(c->batch * c->seq);
    gd_profile_begin(t->ctx, "load batch");
    gd_status st = gd_token_data_batch(c->data, split, c->batch, c->seq, pos, t->x, t->y);
    if (st == GD_OK) st = gd_tensor_write(t->ids, t->x, n * sizeof(int32_t));
    if (st == GD_OK) st = gd_tensor_write(t->targets, t->y, n * sizeof(int32_t));
    gd_profile_end(t->ctx);
    if (st == GD_OK) st = gd_program_run(p);
    if (st == GD_OK) st = gd_tensor_read(t->loss, loss, sizeof *loss);
    return st;
}

/* Mean loss over val_batches batches of the validation split (the same ones every time). */
static gd_status validate(trainer *t, double *out)
{
    /* with ranks, rank r measures batches r, r + N, ...; the others' slots stay 0, so the
     * sum over ranks gives every batch's loss exactly, added up below in batch order */
    int ranks = gd_dist_size(t->c.dist), me = gd_dist_rank(t->c.dist);
    for (int64_t i = 0; i < t->c.val_batches; i++) {
        float l = 0;
        gd_data_pos pos = {.index = i}; /* validation batch i: the same windows every time */
        if (i % ranks == me) {
            gd_status st = run_batch(t, t->eval, GD_SPLIT_VAL, &pos, &l);
            if (st != GD_OK) return st;
        }
        t->losses[i] = l;
    }
    if (ranks > 1) {
        gd_status st = gd_dist_allreduce_f64(t->c.dist, t->losses, (size_t)t->c.val_batches, "the validation losses");
        if (st != GD_OK) return st;
    }
    double sum = 0;
    for (int64_t i = 0; i < t->c.val_batches; i++) sum += t->losses[i];
    *out = sum / (double)t->c.val_batches;
    return GD_OK;
}

/* One step with ranks: rank r trains micro-batches [r K, r K + K) of the step's N K (and
 * skips the others' windows, so every rank's data position stays the global one); then
 * the losses and the gradients are summed over the ranks and the update runs. */
static gd_status overflowed(trainer *t, int *skip);

static gd_status dp_step(trainer *t, int64_t step, gd_data_pos *pos, double *loss_sum, float *norm, int *skip)
{
    const gd_lm_train_config *c = &t->c;
    int me = gd_dist_rank(c->dist);
    int64_t K = c->grad_accum, all = K * gd_dist_size(c->dist);
    gd_status st = GD_OK;
    for (int64_t j = 0; j < all && st == GD_OK; j++) {
        float l = 0;
        if (j / K != me) {
            st = gd_token_data_batch(c->data, GD_SPLIT_TRAIN, c->batch, c->seq, pos, t->x, t->y);
        } else {
            /* the last micro-batch starts the gradients' sums while its backward runs */
            gd_dp_micro(t->dp, step, j % K == 0, j % K == K - 1);
            if ((st = run_batch(t, t->micro, GD_SPLIT_TRAIN, pos, &l)) == GD_OK) st = gd_dp_accumulate(t->dp, j % K == 0);
        }
        t->losses[j] = l;
    }
    if (st != GD_OK) gd_dp_cancel(t->dp);
    /* the gradients first: an overlapped sum is in progress, and the transport takes one
     * collective at a time, in the same order on every rank */
    if (st == GD_OK) st = gd_dp_reduce(t->dp, step);
    char what[64];
    snprintf(what, sizeof what, "the losses of step %lld", (long long)step);
    if (st == GD_OK) st = gd_dist_allreduce_f64(c->dist, t->losses, (size_t)all, what);
    if (st == GD_OK) st = overflowed(t, skip);
    if (st == GD_OK && !*skip) {
        st = gd_program_run(t->step);
        if (st == GD_OK) st = gd_tensor_read(t->norm, norm, sizeof *norm);
        if (st == GD_OK) st = gd_dp_after_update(t->dp, step);
    } else if (st == GD_OK) {
        st = gd_dp_skipped(t->dp);
    }
    *loss_sum = 0;
    for (int64_t j = 0; j < all; j++) *loss_sum += t->losses[j]; /* the order one process adds them in */
    return st;
}

/* With loss scaling: whether the step's summed, scaled gradients hold inf or NaN (their
 * norm is not finite), read after the check program. Without: never. */
static gd_status overflowed(trainer *t, int *skip)
{
    *skip = 0;
    if (!t->scaling) return GD_OK;
    float raw = 0;
    gd_status st = gd_program_run(t->check);
    if (st == GD_OK) st = gd_tensor_read(t->raw_norm, &raw, sizeof raw);
    if (st == GD_OK) *skip = !isfinite(raw);
    return st;
}

/* The scale into the graph: the backward pass's seed multiplies by it, the update by its
 * inverse (exact for powers of two). */
static gd_status scale_write(trainer *t)
{
    float s = (float)t->scale, inv = (float)(1.0 / t->scale);
    gd_status st = gd_tensor_write(t->scale_t, &s, sizeof s);
    if (st == GD_OK) st = gd_tensor_write(t->unscale_t, &inv, sizeof inv);
    return st;
}

/* GradScaler's rule after a step: a skipped one backs the scale off, growth_interval good
 * ones in a row grow it. A scale f32 cannot hold (past FLT_MAX, under FLT_MIN) is not
 * taken: growth stops at the top, and at the bottom training stops (every step's
 * gradients were inf or NaN: scaling cannot help). Returns 0 in that case. */
static int scale_after(trainer *t, int skipped)
{
    const gd_loss_scale_config *ls = &t->c.loss_scale;
    if (skipped) t->skipped++;
    if (!t->dynamic) return 1;
    if (skipped) {
        t->good = 0;
        double s = (double)(float)(t->scale * ls->backoff);
        if (!(s >= FLT_MIN)) return 0;
        t->scale = s;
    } else if (++t->good >= ls->growth_interval) {
        t->good = 0;
        double s = (double)(float)(t->scale * ls->growth);
        if (isfinite(s) && s <= FLT_MAX) t->scale = s;
    }
    return 1;
}

/* What this rank holds for training besides activations. */
static void memory(trainer *t, gd_lm_train_result *out)
{
    out->ranks = gd_dist_size(t->c.dist);
    if (t->dp != NULL) {
        gd_dp_memory(t->dp, &out->param_bytes, &out->grad_bytes, &out->optimizer_bytes);
        snprintf(out->summed_on, sizeof out->summed_on, "%s", gd_dp_summed_on(t->dp));
        return;
    }
    size_t p = 0;
    for (int i = 0; i < gd_graph_param_count(t->g); i++) p += (size_t)gd_tensor_numel(gd_graph_param(t->g, i)) * sizeof(float);
    out->param_bytes = p;
    out->grad_bytes = t->c.grad_accum > 1 || t->scaling ? p : 0;
    out->optimizer_bytes = 2 * p;
}

static void metric(trainer *t, const gd_lm_progress *p)
{
    if (t->metrics == NULL) return;
    fprintf(t->metrics, "{\"step\":%lld,\"loss\":%.6g,\"lr\":%.6g,", (long long)p->step, p->loss, p->lr);
    /* a skipped step has no norm: null, as the metrics reader takes a gap */
    if (isfinite(p->grad_norm)) fprintf(t->metrics, "\"grad_norm\":%.6g", p->grad_norm);
    else fprintf(t->metrics, "\"grad_norm\":null");
    fprintf(t->metrics, ",\"tokens_per_s\":%.6g,\"elapsed_s\":%.3f", p->tokens_per_s, p->elapsed_s);
    if (!isnan(p->val_loss)) fprintf(t->metrics, ",\"val_loss\":%.6g", p->val_loss);
    if (t->scaling) fprintf(t->metrics, ",\"loss_scale\":%.9g,\"skipped_steps\":%lld", p->loss_scale, (long long)p->skipped_steps);
    fprintf(t->metrics, "}\n");
    fflush(t->metrics);
}

/* Opens metrics.jsonl for appending; on resume, drops the lines past the step resumed
 * from (the run that wrote them did not reach its next checkpoint). */
static gd_status open_metrics(trainer *t, int64_t keep_upto, char *path, size_t cap)
{
    mkdir(t->c.out_dir, 0755); /* may exist; if it cannot be made, the open below says so */
    snprintf(path, cap, "%s/metrics.jsonl", t->c.out_dir);
    if (keep_upto >= 0) {
        FILE *in = fopen(path, "r");
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *out = in != NULL ? fopen(tmp, "w") : NULL;
        if (in != NULL && out != NULL) {
            char line[4096];
            while (fgets(line, sizeof line, in) != NULL) {
                long long step = -1;
                if (sscanf(line, "{\"step\":%lld", &step) == 1 && step <= keep_upto) fputs(line, out);
            }
        }
        if (in != NULL) fclose(in);
        if (out != NULL && fclose(out) == 0) rename(tmp, path);
    }
    t->metrics = fopen(path, keep_upto >= 0 ? "a" : "w");
    if (t->metrics == NULL) return gd_ctx_fail(t->ctx, GD_ERR_IO, "%s: cannot write the metrics log", path);
    return GD_OK;
}

static gd_status defaults(gd_ctx *ctx, gd_lm_train_config *c)
{
    if (c->data == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "no data");
    if (c->steps == 0) c->steps = 100;
    if (c->batch == 0) c->batch = 8;
    if (c->seq == 0) c->seq = c->model.max_seq;
    if (c->grad_accum == 0) c->grad_accum = 1;
    if (c->lr == 0) c->lr = 1e-3;
    if (c->min_lr == 0) c->min_lr = c->lr / 10;
    if (c->beta1 == 0) c->beta1 = 0.9;
    if (c->beta2 == 0) c->beta2 = 0.95;
    if (c->val_batches == 0) c->val_batches = 8;
    if (c->report_every_s == 0) c->report_every_s = 1;
    if (c->dtype != GD_F32 && c->dtype != GD_BF16 && c->dtype != GD_F16)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "dtype %s; f32, bf16 or f16", gd_dtype_name(c->dtype));
    if (c->steps < 0 || c->stop_at < 0 || c->batch < 1 || c->seq < 1 || c->grad_accum < 1 || c->warmup < 0 || c->warmup >= c->steps ||
        !(c->lr > 0) || !(c->min_lr >= 0) || !(c->weight_decay >= 0) || !(c->clip >= 0) || c->val_every < 0 ||
        c->val_batches < 1 || c->ckpt_every < 0)
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "steps %lld, batch %lld, seq %lld, accum %lld, warmup %lld (below steps), lr %g, "
                           "min_lr %g, weight decay %g, clip %g: none may be negative",
                           (long long)c->steps, (long long)c->batch, (long long)c->seq, (long long)c->grad_accum,
                           (long long)c->warmup, c->lr, c->min_lr, c->weight_decay, c->clip);
    if (c->seq > c->model.max_seq)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "sequences of %lld tokens, longer than the model's %lld positions",
                           (long long)c->seq, (long long)c->model.max_seq);
    if (gd_token_data_vocab(c->data) > c->model.vocab_size)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "the data was encoded with %d tokens, the model has %lld",
                           (int)gd_token_data_vocab(c->data), (long long)c->model.vocab_size);
    gd_loss_scale_config *ls = &c->loss_scale;
    if (ls->mode == GD_LOSS_SCALE_AUTO) ls->mode = c->dtype == GD_F16 ? GD_LOSS_SCALE_DYNAMIC : GD_LOSS_SCALE_OFF;
    if (ls->mode != GD_LOSS_SCALE_OFF && ls->mode != GD_LOSS_SCALE_FIXED && ls->mode != GD_LOSS_SCALE_DYNAMIC)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "loss scaling mode %d; auto, off, fixed or dynamic", (int)ls->mode);
    if (ls->init == 0) ls->init = 65536;
    if (ls->growth == 0) ls->growth = 2;
    if (ls->backoff == 0) ls->backoff = 0.5;
    if (ls->growth_interval == 0) ls->growth_interval = 2000;
    if (!(ls->init >= FLT_MIN && ls->init <= FLT_MAX))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "loss scale %g: a positive number f32 holds (%g to %g)", ls->init,
                           (double)FLT_MIN, (double)FLT_MAX);
    if (!(ls->growth > 1 && isfinite(ls->growth)) || !(ls->backoff > 0 && ls->backoff < 1) || ls->growth_interval < 1)
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "loss scale growth %g (above 1), backoff %g (between 0 and 1), growth interval %lld (at least 1)",
                           ls->growth, ls->backoff, (long long)ls->growth_interval);
    if (gd_token_data_tokens(c->data, GD_SPLIT_TRAIN) < c->seq + 1 || gd_token_data_tokens(c->data, GD_SPLIT_VAL) < c->seq + 1)
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "%lld training and %lld validation tokens; each split needs more than seq = %lld",
                           (long long)gd_token_data_tokens(c->data, GD_SPLIT_TRAIN),
                           (long long)gd_token_data_tokens(c->data, GD_SPLIT_VAL), (long long)c->seq);
    return GD_OK;
}

gd_status gd_lm_train(gd_ctx *ctx, const gd_lm_train_config *cfg, gd_lm_train_result *out)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (cfg == NULL || out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "NULL config or result");
    memset(out, 0, sizeof *out);
    out->val_loss = NAN;
    trainer t = {.ctx = ctx, .c = *cfg};
    gd_status st = defaults(ctx, &t.c);
    if (st != GD_OK) return st;
    const gd_lm_train_config *c = &t.c;
    t.scaling = c->loss_scale.mode != GD_LOSS_SCALE_OFF;
    t.dynamic = c->loss_scale.mode == GD_LOSS_SCALE_DYNAMIC;
    t.scale = (double)(float)c->loss_scale.init;
    size_t n = (size_t)(c->batch * c->seq);
    t.x = malloc(2 * n * sizeof(int32_t));
    if (t.x == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory for a batch");
    t.y = t.x + n;
    int ranks = gd_dist_size(c->dist), rank0 = gd_dist_rank(c->dist) == 0;
    int64_t per_step = c->grad_accum * ranks;
    t.losses = calloc((size_t)(per_step > c->val_batches ? per_step : c->val_batches), sizeof *t.losses);
    if (t.losses == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = build(&t)) != GD_OK) goto done;
    out->activation_bytes = gd_program_planned_bytes(t.dp != NULL || t.scaling ? t.micro : t.step, gd_ctx_backend(ctx));
    memory(&t, out);

    gd_lm_state state = {.step = 0, .pos = {.seed = c->seed}, .seed = c->seed};
    if (c->resume_dir != NULL) {
        if ((st = gd_lm_checkpoint_load(ctx, t.g, &c->model, c->resume_dir, 1, &state)) != GD_OK) goto done;
    } else if ((st = gd_graph_init_params(t.g, c->seed)) != GD_OK) {
        st = failed(ctx, "initializing parameters");
        goto done;
    }
    /* a dynamic scale continues from the checkpoint's (a fixed one is the config's); a
     * checkpoint of a run without scaling starts the scaler afresh */
    if (t.scaling && state.loss_scale > 0) {
        if (t.dynamic) {
            t.scale = (double)(float)state.loss_scale;
            t.good = state.scale_good_steps;
        }
        t.skipped = state.skipped_steps;
    }
    if (!t.scaling) state.loss_scale = 0; /* its checkpoints then hold no scaler */
    if (c->out_dir != NULL && rank0 && (st = open_metrics(&t, c->resume_dir != NULL ? state.step : -1, out->metrics,
                                                 sizeof out->metrics)) != GD_OK)
        goto done;

    double t0 = now_s(), last_report = 0;
    int64_t first = state.step, tokens_per_step = c->batch * c->seq * per_step;
    int64_t end = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
    for (int64_t s = state.step; s < end; s++) {
        double lr = schedule(c, s);
        if ((st = gd_optimizer_set_lr(t.g, lr)) != GD_OK) break;
        if (t.scaling && (st = scale_write(&t)) != GD_OK) break;
        double loss_sum = 0;
        float l = 0, norm = 0;
        int skip = 0;
        gd_profile_begin(ctx, "train step");
        if (t.dp != NULL) {
            st = dp_step(&t, s + 1, &state.pos, &loss_sum, &norm, &skip);
        } else if (t.scaling) {
            for (int64_t m = 0; m < c->grad_accum && st == GD_OK; m++) {
                st = run_batch(&t, t.micro, GD_SPLIT_TRAIN, &state.pos, &l);
                loss_sum += l;
            }
            if (st == GD_OK) st = overflowed(&t, &skip);
            if (st == GD_OK) st = gd_program_run(skip ? t.reset : t.step);
            if (st == GD_OK && !skip) st = gd_tensor_read(t.norm, &norm, sizeof norm);
        } else {
            for (int64_t m = 0; m + 1 < c->grad_accum && st == GD_OK; m++) {
                st = run_batch(&t, t.micro, GD_SPLIT_TRAIN, &state.pos, &l);
                loss_sum += l;
            }
            if (st == GD_OK) st = run_batch(&t, t.step, GD_SPLIT_TRAIN, &state.pos, &l);
            if (st == GD_OK) st = gd_tensor_read(t.norm, &norm, sizeof norm);
            loss_sum += l;
        }
        gd_profile_end(ctx);
        if (st != GD_OK) {
            st = failed(ctx, "a training step");
            break;
        }
        state.step = s + 1;
        double loss = loss_sum / (double)per_step;
        out->steps = state.step;
        out->train_loss = loss;
        if (skip) norm = NAN;
        int scale_ok = !t.scaling || scale_after(&t, skip);
        out->loss_scale = t.scaling ? t.scale : 0;
        out->skipped_steps = t.skipped;
        if (!isfinite(loss) || (!skip && !isfinite(norm)) || !scale_ok) {
            out->saw_nan = 1;
            break;
        }
        if (t.scaling) {
            state.loss_scale = t.scale;
            state.scale_good_steps = t.good;
            state.skipped_steps = t.skipped;
        }
        double val = NAN;
        int last = state.step == end;
        if (last || (c->val_every > 0 && state.step % c->val_every == 0)) {
            gd_profile_begin(ctx, "evaluate");
            st = validate(&t, &val);
            gd_profile_end(ctx);
            if (st != GD_OK) {
                st = failed(ctx, "validation");
                break;
            }
            out->val_loss = val;
        }
        double el = now_s() - t0;
        gd_lm_progress pr = {.step = state.step, .steps = c->steps, .loss = loss, .lr = lr, .grad_norm = norm,
                             .val_loss = val, .elapsed_s = el, .loss_scale = out->loss_scale,
                             .skipped_steps = t.skipped, .skipped = skip};
        pr.tokens_per_s = el > 0 ? (double)((state.step - first) * tokens_per_step) / el : 0;
        pr.eta_s = state.step > first ? el / (double)(state.step - first) * (double)(c->steps - state.step) : 0;
        out->tokens_per_s = pr.tokens_per_s;
        gd_profile_counter(ctx, "tokens/s", pr.tokens_per_s);
        metric(&t, &pr);
        if (c->progress != NULL && (last || !isnan(val) || el - last_report >= c->report_every_s)) {
            c->progress(c->user, &pr);
            last_report = el;
        }
        if (c->out_dir != NULL && (last || (c->ckpt_every > 0 && state.step % c->ckpt_every == 0))) {
            /* rank 0 writes; a sharded optimizer's other moments are sent to it first */
            const gd_st_entry *extra = NULL;
            int n_extra = 0;
            if (t.dp != NULL) st = gd_dp_gather_moments(t.dp, &extra, &n_extra);
            if (st == GD_OK && rank0)
                st = gd_lm_checkpoint_save_with(ctx, t.g, &c->model, c->tokenizer, &state, c->out_dir, extra, n_extra,
                                                out->checkpoint, sizeof out->checkpoint);
            if (st != GD_OK) break;
        }
    }
    /* whether the sums overlapped the backward is known once steps ran */
    if (t.dp != NULL) snprintf(out->summed_on, sizeof out->summed_on, "%s", gd_dp_summed_on(t.dp));
done:
    trainer_free(&t);
    return st;
}
