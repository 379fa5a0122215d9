/* train.c — train an image classifier on a gd_dataset and measure its test accuracy.
 *
 * One graph holds everything: the model, its loss and argmax, the backward pass and the
 * optimizer's in-place updates. Two programs are compiled from it: the training step
 * (loss and predictions as targets, with updates) and the evaluation (predictions only,
 * without updates, so the same parameters serve both with nothing copied). Batches have
 * a fixed size because programs are planned for fixed shapes; the last, partial batch is
 * padded with label -1, which the loss ignores and the accuracy count skips. */
#include "gradus_classifier.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLASSES 10

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct model {
    gd_graph *g;
    gd_tensor *x, *y, *loss, *pred;
    gd_program *step, *eval;
} model;

static void model_free(model *m)
{
    if (m->step != NULL) gd_program_free(m->step);
    if (m->eval != NULL) gd_program_free(m->eval);
    if (m->g != NULL) gd_graph_free(m->g);
    memset(m, 0, sizeof *m);
}

/* Prefixes the context's message (left by a builder that returned NULL) with `what`. */
static gd_status failed(gd_ctx *ctx, gd_status st, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", gd_ctx_error(ctx));
    /* a builder's or compile's NULL carries its status in the context */
    if (st == GD_ERR_INVALID && gd_ctx_status(ctx) != GD_OK) st = gd_ctx_status(ctx);
    return gd_ctx_fail(ctx, st, "gd_train_classifier: %s: %s", what, msg[0] ? msg : "unknown error");
}

static gd_status build(gd_ctx *ctx, const gd_train_config *cfg, int64_t batch, int64_t h, int64_t w, model *m)
{
    int cnn = strcmp(cfg->model, "cnn") == 0;
    gd_graph *g = m->g = gd_graph_new(ctx);
    if (g == NULL) return failed(ctx, GD_ERR_NOMEM, "creating the graph");
    m->x = gd_input(g, "images", GD_F32, 4, (int64_t[]){batch, 1, h, w});
    m->y = gd_input(g, "labels", GD_I32, 1, (int64_t[]){batch});
    gd_tensor *logits = cnn ? gd_nn_cnn(m->x) : gd_nn_mlp(m->x, cfg->hidden > 0 ? cfg->hidden : 128);
    m->loss = gd_cross_entropy(logits, m->y, -1);
    m->pred = gd_argmax(logits, 1, 0);
    if (m->loss == NULL || m->pred == NULL) return failed(ctx, GD_ERR_INVALID, cnn ? "building the CNN" : "building the MLP");

    gd_status st = gd_backward(g, m->loss);
    if (st != GD_OK) return failed(ctx, st, "backward pass");
    if (cfg->sgd) {
        gd_sgd_config o = {.lr = cfg->lr, .momentum = 0.9, .weight_decay = cfg->weight_decay};
        st = gd_optimizer_sgd(g, &o);
    } else {
        gd_adamw_config o = {.lr = cfg->lr, .weight_decay = cfg->weight_decay};
        st = gd_optimizer_adamw(g, &o);
    }
    if (st != GD_OK) return failed(ctx, st, "optimizer");
    st = gd_graph_init_params(g, cfg->seed);
    if (st != GD_OK) return failed(ctx, st, "initializing parameters");

    m->step = gd_compile(g, 2, (gd_tensor *[]){m->loss, m->pred}, GD_COMPILE_UPDATES);
    if (m->step == NULL) return failed(ctx, GD_ERR_INVALID, "compiling the training step");
    m->eval = gd_compile(g, 1, &m->pred, 0);
    if (m->eval == NULL) return failed(ctx, GD_ERR_INVALID, "compiling the evaluation");
    return GD_OK;
}

/* Copies examples idx[0..valid) (or start.. when idx is NULL) into a batch, padding the
 * rest with blank images labelled -1. */
static void fill_batch(const gd_dataset *d, const int64_t *idx, int64_t start, int64_t valid, int64_t batch,
                       float *xb, int32_t *yb)
{
    size_t hw = (size_t)(d->h * d->w);
    for (int64_t j = 0; j < batch; j++) {
        if (j < valid) {
            int64_t e = idx ? idx[start + j] : start + j;
            memcpy(xb + (size_t)j * hw, d->images + (size_t)e * hw, hw * sizeof(float));
            yb[j] = d->labels[e];
        } else {
            memset(xb + (size_t)j * hw, 0, hw * sizeof(float));
            yb[j] = -1;
        }
    }
}

static gd_status evaluate(gd_ctx *ctx, model *m, const gd_dataset *d, int64_t batch, float *xb, int32_t *yb,
                          int64_t *pb, double *accuracy)
{
    size_t hw = (size_t)(d->h * d->w);
    int64_t correct = 0;
    for (int64_t start = 0; start < d->n; start += batch) {
        int64_t valid = d->n - start < batch ? d->n - start : batch;
        gd_profile_begin(ctx, "load batch");
        fill_batch(d, NULL, start, valid, batch, xb, yb);
        gd_profile_end(ctx);
        gd_status st = gd_tensor_write(m->x, xb, (size_t)batch * hw * sizeof(float));
        if (st == GD_OK) st = gd_program_run(m->eval);
        if (st == GD_OK) st = gd_tensor_read(m->pred, pb, (size_t)batch * sizeof(int64_t));
        if (st != GD_OK) return failed(ctx, st, "evaluation");
        for (int64_t j = 0; j < valid; j++) correct += pb[j] == yb[j];
    }
    *accuracy = (double)correct / (double)d->n;
    return GD_OK;
}

/* a * b * c floats in bytes, when that fits a size_t (all three positive) */
static int float_bytes(int64_t a, int64_t b, int64_t c, size_t *bytes)
{
    size_t n;
    if (a <= 0 || b <= 0 || c <= 0 || __builtin_mul_overflow((size_t)a, (size_t)b, &n) ||
        __builtin_mul_overflow(n, (size_t)c, &n) || __builtin_mul_overflow(n, sizeof(float), &n))
        return 0;
    *bytes = n;
    return 1;
}

static gd_status check_data(gd_ctx *ctx, const gd_dataset *d, const char *which, const gd_dataset *like)
{
    if (d == NULL || d->n <= 0 || d->images == NULL || d->labels == NULL || d->h <= 0 || d->w <= 0)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_train_classifier: the %s set is empty or missing", which);
    /* Batches index the images with products of these dims: a dataset whose size does not
     * even fit in memory is corrupt, and a wrapped product would be a small buffer. */
    size_t bytes;
    if (!float_bytes(d->n, d->h, d->w, &bytes))
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "gd_train_classifier: the %s set claims %lld images of %lldx%lld, whose size overflows: "
                           "a corrupt dataset", which, (long long)d->n, (long long)d->h, (long long)d->w);
    if (like != NULL && (d->h != like->h || d->w != like->w))
        return gd_ctx_fail(ctx, GD_ERR_SHAPE, "gd_train_classifier: test images are %lldx%lld but training images %lldx%lld",
                       (long long)d->h, (long long)d->w, (long long)like->h, (long long)like->w);
    for (int64_t i = 0; i < d->n; i++)
        if (d->labels[i] < 0 || d->labels[i] >= CLASSES)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_train_classifier: %s example %lld has label %d; the classifiers have %d classes",
                           which, (long long)i, d->labels[i], CLASSES);
    return GD_OK;
}

/* The metrics log: one JSON object per line. A number that is not finite is null (JSON
 * has no NaN). A write that fails closes the log and says so in the result. */
typedef struct metrics_log {
    FILE *f;
    int failed;
} metrics_log;

static void metric(FILE *f, const char *key, double v, int last)
{
    if (isfinite(v)) fprintf(f, "\"%s\": %.9g%s", key, v, last ? "}\n" : ", ");
    else fprintf(f, "\"%s\": null%s", key, last ? "}\n" : ", ");
}

static void metrics_end_line(metrics_log *ml, int flush)
{
    if ((flush && fflush(ml->f) != 0) || ferror(ml->f)) {
        fclose(ml->f);
        ml->f = NULL;
        ml->failed = 1;
    }
}

gd_status gd_train_classifier(gd_ctx *ctx, const gd_dataset *train, const gd_dataset *test,
                              const gd_train_config *cfg_in, gd_train_result *out)
{
    if (ctx == NULL || cfg_in == NULL || out == NULL)
        return ctx ? gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_train_classifier: NULL config or result") : GD_ERR_INVALID;
    memset(out, 0, sizeof *out);
    gd_train_config cfg = *cfg_in;
    if (cfg.model == NULL || (strcmp(cfg.model, "mlp") != 0 && strcmp(cfg.model, "cnn") != 0))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_train_classifier: model \"%s\": want \"mlp\" or \"cnn\"",
                       cfg.model ? cfg.model : "(null)");
    if (cfg.epochs <= 0) cfg.epochs = 1;
    if (cfg.batch <= 0) cfg.batch = 64;
    if (cfg.lr <= 0) cfg.lr = cfg.sgd ? 0.05 : 2e-3;
    if (cfg.report_every_s <= 0) cfg.report_every_s = 0.25;
    gd_status st = check_data(ctx, train, "training", NULL);
    if (st == GD_OK) st = check_data(ctx, test, "test", train);
    if (st != GD_OK) return st;

    const int64_t B = cfg.batch, hw = train->h * train->w;
    const int64_t n = cfg.limit > 0 && cfg.limit < train->n ? cfg.limit : train->n;
    const int64_t steps = (n + B - 1) / B, total = steps * cfg.epochs;
    model m = {0};
    size_t batch_bytes;
    if (!float_bytes(B, hw, 1, &batch_bytes))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_train_classifier: a batch of %lld images of %lldx%lld is too large",
                       (long long)B, (long long)train->h, (long long)train->w);
    int64_t *perm = malloc((size_t)n * sizeof *perm), *pb = malloc((size_t)B * sizeof *pb);
    float *xb = malloc(batch_bytes);
    int32_t *yb = malloc((size_t)B * sizeof *yb);
    if (perm == NULL || pb == NULL || xb == NULL || yb == NULL)
        st = gd_ctx_fail(ctx, GD_ERR_NOMEM,
                         "gd_train_classifier: out of memory for batches of %lld images of %lldx%lld (%zu bytes)",
                         (long long)B, (long long)train->h, (long long)train->w, batch_bytes);
    metrics_log ml = {NULL, 0};
    if (st == GD_OK && cfg.metrics != NULL && (ml.f = fopen(cfg.metrics, "w")) == NULL)
        st = gd_ctx_fail(ctx, GD_ERR_IO, "gd_train_classifier: metrics log %s: cannot write: %s", cfg.metrics,
                         strerror(errno));
    if (st == GD_OK) st = build(ctx, &cfg, B, train->h, train->w, &m);

    const double t0 = now_s();
    double last_report = t0;
    double win_loss = 0, ep_loss = 0;
    int64_t win_steps = 0, win_seen = 0, win_correct = 0, ep_steps = 0, ep_seen = 0, ep_correct = 0, done = 0;
    for (int epoch = 0; st == GD_OK && epoch < cfg.epochs && !out->saw_nan; epoch++) {
        gd_shuffle(perm, n, cfg.seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1)));
        ep_loss = 0;
        ep_steps = ep_seen = ep_correct = 0;
        for (int64_t s = 0; s < steps; s++) {
            int64_t valid = n - s * B < B ? n - s * B : B;
            double ts = now_s();
            gd_profile_begin(ctx, "train step");
            gd_profile_begin(ctx, "load batch");
            fill_batch(train, perm, s * B, valid, B, xb, yb);
            gd_profile_end(ctx);
            /* Cosine decay from the peak to zero over the whole run: a few epochs end
             * noticeably better annealed than at a constant rate. */
            double lr = cfg.lr;
            if (!cfg.constant_lr) {
                lr = cfg.lr * 0.5 * (1.0 + cos(3.14159265358979 * (double)done / (double)total));
                st = gd_optimizer_set_lr(m.g, lr);
            }
            float loss = 0;
            if (st == GD_OK) st = gd_tensor_write(m.x, xb, (size_t)(B * hw) * sizeof(float));
            if (st == GD_OK) st = gd_tensor_write(m.y, yb, (size_t)B * sizeof(int32_t));
            if (st == GD_OK) st = gd_program_run(m.step);
            if (st == GD_OK) st = gd_tensor_read(m.loss, &loss, sizeof loss);
            if (st == GD_OK) st = gd_tensor_read(m.pred, pb, (size_t)B * sizeof(int64_t));
            gd_profile_end(ctx);
            if (st != GD_OK) {
                st = failed(ctx, st, "training step");
                break;
            }
            done++;
            double t = now_s();
            gd_profile_counter(ctx, "examples/s", (double)valid / (t - ts > 1e-9 ? t - ts : 1e-9));
            if (!isfinite(loss)) {
                out->saw_nan = 1;
                break;
            }
            int64_t correct = 0;
            for (int64_t j = 0; j < valid; j++) correct += pb[j] == yb[j];
            if (ml.f != NULL) {
                fprintf(ml.f, "{\"step\": %lld, \"epoch\": %d, ", (long long)done, epoch + 1);
                metric(ml.f, "loss", loss, 0);
                metric(ml.f, "accuracy", (double)correct / (double)valid, 0);
                metric(ml.f, "lr", lr, 0);
                metric(ml.f, "examples_per_s", (double)valid / (t - ts > 1e-9 ? t - ts : 1e-9), 0);
                metric(ml.f, "elapsed_s", t - t0, 1);
                metrics_end_line(&ml, s == steps - 1 || t - last_report >= cfg.report_every_s);
            }
            win_loss += loss;
            win_steps++;
            win_seen += valid;
            win_correct += correct;
            ep_loss += loss;
            ep_steps++;
            ep_seen += valid;
            ep_correct += correct;

            int last = s == steps - 1;
            if (cfg.progress != NULL && (last || t - last_report >= cfg.report_every_s)) {
                int64_t examples = (int64_t)epoch * n + s * B + valid;
                gd_train_progress p = {
                    .epoch = epoch + 1, .epochs = cfg.epochs, .step = s + 1, .steps = steps,
                    .examples = examples,
                    .loss = win_loss / (double)win_steps,
                    .accuracy = (double)win_correct / (double)win_seen,
                    .examples_per_s = (double)examples / (t - t0 > 1e-9 ? t - t0 : 1e-9),
                    .elapsed_s = t - t0,
                    .eta_s = (t - t0) / (double)done * (double)(total - done),
                    .epoch_done = last,
                };
                cfg.progress(cfg.user, &p);
                last_report = t;
                win_loss = 0;
                win_steps = win_seen = win_correct = 0;
            }
        }
    }
    out->steps = done;
    out->train_s = now_s() - t0;
    if (ep_steps > 0) {
        out->train_loss = ep_loss / (double)ep_steps;
        out->train_accuracy = (double)ep_correct / (double)ep_seen;
    }
    int64_t trained = done * B < n * cfg.epochs ? done * B : n * cfg.epochs;
    out->examples_per_s = out->train_s > 0 ? (double)trained / out->train_s : 0;
    if (st == GD_OK) {
        double t1 = now_s();
        gd_profile_begin(ctx, "evaluate");
        st = evaluate(ctx, &m, test, B, xb, yb, pb, &out->test_accuracy);
        gd_profile_end(ctx);
        out->eval_s = now_s() - t1;
    }
    if (ml.f != NULL) {
        if (st == GD_OK) {
            fprintf(ml.f, "{\"step\": %lld, ", (long long)done);
            metric(ml.f, "test_accuracy", out->test_accuracy, 0);
            metric(ml.f, "elapsed_s", now_s() - t0, 1);
        }
        metrics_end_line(&ml, 1);
        if (ml.f != NULL && fclose(ml.f) != 0) ml.failed = 1;
    }
    out->metrics_failed = ml.failed;
    model_free(&m);
    free(perm);
    free(pb);
    free(xb);
    free(yb);
    return st;
}
