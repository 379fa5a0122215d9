/* optim.c — optimizers: they append, after gd_backward, one in-place update node per
 * trained parameter (sgd_update / adamw_update, see src/ops/optim.c), plus the states
 * those need:
 *   "optim.lr"            f32 scalar, the learning rate (gd_optimizer_set_lr)
 *   "optim.step"          f32 scalar, AdamW's step count, incremented by every run
 *   "<param>.sgd_buf"     SGD momentum buffer
 *   "<param>.adam_m/v"    AdamW moments
 * Updates run only in programs compiled with GD_COMPILE_UPDATES, after every reader of the
 * old parameter values. A graph takes one optimizer.
 */
#include "gradus.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define LR_STATE "optim.lr"

/* The trained parameters: those the loss depends on (the others have no gradient). */
typedef struct trainable {
    int n;
    gd_tensor **p;
    gd_tensor **g;
} trainable;

static void trainable_free(trainable *t)
{
    free(t->p);
    free(t->g);
}

/* Checks that an optimizer can be added and collects parameters with their gradients.
 * Nothing is added to the graph until everything has been checked. With `narrow`, a
 * gradient that is the exact f32 widening of a half one (a parameter used through a
 * cast) is taken as the half one: the update reads it as it is. */
static gd_status collect(gd_graph *g, const char *who, trainable *t, int n_only, gd_tensor *const *only, int narrow)
{
    t->n = 0;
    t->p = t->g = NULL;
    gd_ctx *ctx = gd_graph_ctx(g);
    if (gd_graph_find(g, LR_STATE) != NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the graph already has an optimizer", who);
    int np = gd_graph_param_count(g);
    t->p = calloc(np > 0 ? (size_t)np : 1, sizeof *t->p);
    t->g = calloc(np > 0 ? (size_t)np : 1, sizeof *t->g);
    if (t->p == NULL || t->g == NULL) {
        trainable_free(t);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", who);
    }
    for (int i = 0; i < np; i++) {
        gd_tensor *p = gd_graph_param(g, i), *gr = narrow ? gd_grad_narrow(g, p) : gd_grad(g, p);
        if (gr == NULL) continue;
        int wanted = only == NULL;
        for (int k = 0; k < n_only && !wanted; k++) wanted = only[k] == p;
        if (!wanted) continue;
        if (gd_tensor_dtype(p) != GD_F32) {
            char b[64];
            trainable_free(t);
            return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED, "%s: parameter %s is %s; optimizers update f32 parameters", who,
                           gd_tensor_name(p), gd_tensor_describe(p, b, sizeof b));
        }
        t->p[t->n] = p;
        t->g[t->n] = gr;
        t->n++;
    }
    if (t->n == 0) {
        trainable_free(t);
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "%s: no parameter has a gradient (call gd_backward first; does the loss depend on any?)", who);
    }
    return GD_OK;
}

/* A state named "<param>.<suffix>" shaped like the parameter. */
static gd_tensor *state_like(gd_tensor *p, const char *suffix)
{
    char name[256];
    int ndim = gd_tensor_ndim(p);
    int64_t shape[GD_MAX_DIMS];
    for (int k = 0; k < ndim; k++) shape[k] = gd_tensor_dim(p, k);
    const char *pname = gd_tensor_name(p);
    snprintf(name, sizeof name, "%s.%s", pname != NULL ? pname : "param", suffix);
    return gd_state(gd_tensor_graph(p), name, gd_tensor_dtype(p), ndim, shape);
}

/* The learning rate as an f32 scalar state, so that schedules change it between runs. */
static gd_tensor *lr_state(gd_graph *g, double lr)
{
    gd_tensor *t = gd_state(g, LR_STATE, GD_F32, 0, NULL);
    float v = (float)lr;
    if (t == NULL || gd_tensor_write(t, &v, sizeof v) != GD_OK) return NULL;
    return t;
}

/* Fails with `what` followed by the message a builder left in the context; the message is
 * copied first because gd_ctx_fail writes into the same buffer. */
static gd_status fail_after(gd_graph *g, const char *who, const char *what, const char *name)
{
    gd_ctx *ctx = gd_graph_ctx(g);
    char cause[512];
    snprintf(cause, sizeof cause, "%s", gd_ctx_error(ctx));
    gd_status s = gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : GD_ERR_INVALID;
    return gd_ctx_fail(ctx, s, "%s: %s%s%s: %s", who, what, name ? " " : "", name ? name : "", cause);
}

/* Scales every gradient by min(1, clip / (global norm + 1e-6)), as torch's clip_grad_norm_. */
static gd_status clip_grads(gd_graph *g, trainable *t, double clip, const char *who)
{
    gd_tensor *norm = gd_global_norm(g, t->n, t->g);
    gd_attr a = gd_attr_f("max_norm", clip);
    gd_tensor *coef = norm != NULL ? gd_op(g, "clip_coef", 1, &norm, 1, &a) : NULL; // () scalar
    for (int i = 0; i < t->n; i++) t->g[i] = gd_mul(t->g[i], coef);
    for (int i = 0; i < t->n; i++)
        if (t->g[i] == NULL) return fail_after(g, who, "clipping by global norm", NULL);
    return GD_OK;
}

/* Checks a hyperparameter: a finite number, at least 0 (above 0 when `positive`). The
 * message says which of those it is not: NaN is not "negative", and an infinite rate
 * would turn every parameter into Inf or NaN at the first step. */
static gd_status check_hyper(gd_graph *g, const char *who, const char *name, double v, int positive)
{
    if (isnan(v)) return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: %s is not a number", who, name);
    if (isinf(v)) return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: %s = %g is not finite", who, name, v);
    if (v < 0 || (positive && v == 0))
        return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: %s = %g is %s", who, name, v, positive ? "not positive" : "negative");
    return GD_OK;
}

gd_status gd_optimizer_sgd(gd_graph *g, const gd_sgd_config *cfg)
{
    if (g == NULL) return GD_ERR_INVALID;
    const char *who = "gd_optimizer_sgd";
    if (cfg == NULL) return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: cfg is NULL", who);
    if (check_hyper(g, who, "lr", cfg->lr, 0) || check_hyper(g, who, "momentum", cfg->momentum, 0) ||
        check_hyper(g, who, "weight_decay", cfg->weight_decay, 0) || check_hyper(g, who, "clip_norm", cfg->clip_norm, 0))
        return GD_ERR_INVALID;
    if (cfg->nesterov && cfg->momentum == 0)
        return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: nesterov needs momentum > 0", who);

    trainable t;
    gd_status s = collect(g, who, &t, 0, NULL, 0);
    if (s != GD_OK) return s;
    gd_tensor *lr = lr_state(g, cfg->lr);
    if (lr == NULL) s = fail_after(g, who, "learning-rate state", NULL);
    if (s == GD_OK && cfg->clip_norm > 0) s = clip_grads(g, &t, cfg->clip_norm, who);
    gd_attr a[3] = {gd_attr_f("momentum", cfg->momentum), gd_attr_f("weight_decay", cfg->weight_decay),
                    gd_attr_i("nesterov", cfg->nesterov != 0)};
    for (int i = 0; s == GD_OK && i < t.n; i++) {
        gd_tensor *buf = state_like(t.p[i], "sgd_buf"), *out[2];
        gd_tensor *in[4] = {t.p[i], t.g[i], buf, lr};
        if (buf == NULL || gd_op_multi(g, "sgd_update", 4, in, 3, a, 2, out) != GD_OK)
            s = fail_after(g, who, "update of", gd_tensor_name(t.p[i]));
    }
    trainable_free(&t);
    return s;
}

gd_status gd_optimizer_adamw(gd_graph *g, const gd_adamw_config *cfg)
{
    if (g == NULL) return GD_ERR_INVALID;
    const char *who = "gd_optimizer_adamw";
    if (cfg == NULL) return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: cfg is NULL", who);
    // zeros take the defaults
    double lr = cfg->lr != 0 ? cfg->lr : 1e-3, b1 = cfg->beta1 != 0 ? cfg->beta1 : 0.9;
    double b2 = cfg->beta2 != 0 ? cfg->beta2 : 0.999, eps = cfg->eps != 0 ? cfg->eps : 1e-8;
    if (check_hyper(g, who, "lr", lr, 1) || check_hyper(g, who, "eps", eps, 1) ||
        check_hyper(g, who, "weight_decay", cfg->weight_decay, 0) || check_hyper(g, who, "clip_norm", cfg->clip_norm, 0))
        return GD_ERR_INVALID;
    if (!(b1 > 0 && b1 < 1) || !(b2 > 0 && b2 < 1))
        return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: beta1 %g, beta2 %g: betas must be in (0, 1)", who, b1, b2);

    if (cfg->n_params < 0 || (cfg->n_params > 0 && cfg->params == NULL))
        return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: %d parameters listed at %p", who, cfg->n_params,
                           (const void *)cfg->params);
    if (cfg->grad_norm != NULL &&
        (gd_tensor_graph(cfg->grad_norm) != g || gd_tensor_dtype(cfg->grad_norm) != GD_F32 ||
         gd_tensor_numel(cfg->grad_norm) != 1)) {
        char b[96];
        return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "%s: grad_norm %s must be an f32 scalar of this graph", who,
                           gd_tensor_describe(cfg->grad_norm, b, sizeof b));
    }
    trainable t;
    gd_status s = collect(g, who, &t, cfg->n_params, cfg->params, 1);
    if (s != GD_OK) return s;
    gd_tensor *lrs = lr_state(g, lr);
    // step <- step + 1 before the updates, which read the new value: the first run is t = 1
    gd_tensor *step = gd_state(g, "optim.step", GD_F32, 0, NULL);
    gd_tensor *step1 = gd_assign(step, gd_scale(step, 1.0, 1.0));
    if (lrs == NULL || step1 == NULL) s = fail_after(g, who, "optimizer states", NULL);
    /* clipping: the factor goes into the updates as their gradient scale (no product
     * over the gradients); the norm is the caller's when it has one */
    gd_tensor *coef = NULL;
    if (s == GD_OK && cfg->clip_norm > 0) {
        gd_tensor *norm = cfg->grad_norm != NULL ? cfg->grad_norm : gd_global_norm_as(g, t.n, t.g, GD_F32);
        gd_attr ca = gd_attr_f("max_norm", cfg->clip_norm);
        coef = norm != NULL ? gd_op(g, "clip_coef", 1, &norm, 1, &ca) : NULL;
        if (coef == NULL) s = fail_after(g, who, "clipping by global norm", NULL);
    }
    gd_attr a[4] = {gd_attr_f("beta1", b1), gd_attr_f("beta2", b2), gd_attr_f("eps", eps),
                    gd_attr_f("weight_decay", cfg->weight_decay)};
    for (int i = 0; s == GD_OK && i < t.n; i++) {
        gd_tensor *m = state_like(t.p[i], "adam_m"), *v = state_like(t.p[i], "adam_v"), *out[3];
        gd_tensor *in[7] = {t.p[i], t.g[i], m, v, step1, lrs, coef};
        if (m == NULL || v == NULL || gd_op_multi(g, "adamw_update", coef != NULL ? 7 : 6, in, 4, a, 3, out) != GD_OK)
            s = fail_after(g, who, "update of", gd_tensor_name(t.p[i]));
        else if (cfg->updated != NULL)
            cfg->updated[i] = out[0];
    }
    if (s == GD_OK && cfg->updated != NULL) cfg->updated[t.n] = NULL;
    trainable_free(&t);
    return s;
}

gd_status gd_optimizer_set_lr(gd_graph *g, double lr)
{
    if (g == NULL) return GD_ERR_INVALID;
    gd_tensor *t = gd_graph_find(g, LR_STATE);
    if (t == NULL) return gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "gd_optimizer_set_lr: the graph has no optimizer");
    if (check_hyper(g, "gd_optimizer_set_lr", "lr", lr, 0) != GD_OK) return GD_ERR_INVALID;
    float v = (float)lr;
    return gd_tensor_write(t, &v, sizeof v);
}
