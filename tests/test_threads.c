/* test_threads.c — two gradus contexts trained at once from two threads.
 *
 * Each context has its own instance of the fast CPU backend (its own thread count and
 * scratch) over the one worker pool of the process. Two small classifiers (the CNN and
 * the MLP of gradus_classifier.h, on the procedural shapes) are trained for a few AdamW
 * steps, first one after the other, then both at once from two threads, and then with
 * the models swapped between the threads; every step's loss must be bitwise the same in
 * all runs. Kernels of the two contexts interleave at random in the concurrent runs, so
 * a kernel that used the other instance's scratch, or state shared without a lock, shows
 * as a different loss (and under ThreadSanitizer, which CI runs this test with, as a
 * reported race).
 */
#include "gradus_classifier.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 6
#define BATCH 32

typedef struct job {
    const char *model;      /* "cnn" or "mlp" */
    uint64_t seed;
    int threads;            /* of this context's backends */
    const gd_dataset *data;
    float loss[STEPS];
    char err[600];          /* empty when the run succeeded */
} job;

static int failures;

static void fail(job *j, gd_ctx *ctx, const char *what)
{
    snprintf(j->err, sizeof j->err, "%s %s: %s", j->model, what, ctx != NULL ? gd_ctx_error(ctx) : "no context");
}

/* Trains j's model for STEPS steps in a context of its own; the losses go to j->loss. */
static void *train(void *arg)
{
    job *j = arg;
    j->err[0] = '\0';
    gd_ctx *ctx = NULL;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK) {
        fail(j, NULL, "gd_ctx_create");
        return NULL;
    }
    gd_ctx_set_threads(ctx, j->threads);
    if (gd_ctx_use_backend(ctx, "cpu") != GD_OK) {
        fail(j, ctx, "the cpu backend");
        gd_ctx_free(ctx);
        return NULL;
    }
    int64_t hw = j->data->h * j->data->w;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "images", GD_F32, 4, (int64_t[]){BATCH, 1, j->data->h, j->data->w});
    gd_tensor *y = gd_input(g, "labels", GD_I32, 1, (int64_t[]){BATCH});
    gd_tensor *logits = strcmp(j->model, "cnn") == 0 ? gd_nn_cnn(x) : gd_nn_mlp(x, 64);
    gd_tensor *loss = gd_cross_entropy(logits, y, -1);
    gd_program *step = NULL;
    if (loss == NULL || gd_backward(g, loss) != GD_OK) {
        fail(j, ctx, "building");
    } else if (gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 2e-3, .weight_decay = 1e-4}) != GD_OK ||
               gd_graph_init_params(g, j->seed) != GD_OK) {
        fail(j, ctx, "optimizer");
    } else if ((step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES)) == NULL) {
        fail(j, ctx, "compile");
    }
    for (int s = 0; s < STEPS && step != NULL && j->err[0] == '\0'; s++) {
        /* batch s: examples s*BATCH .. in order (the dataset is large enough) */
        const float *xb = j->data->images + (int64_t)s * BATCH * hw;
        const int32_t *yb = j->data->labels + (int64_t)s * BATCH;
        if (gd_tensor_write(x, xb, sizeof(float) * (size_t)(BATCH * hw)) != GD_OK ||
            gd_tensor_write(y, yb, sizeof(int32_t) * BATCH) != GD_OK || gd_program_run(step) != GD_OK ||
            gd_tensor_read(loss, &j->loss[s], sizeof(float)) != GD_OK)
            fail(j, ctx, "step");
    }
    gd_program_free(step);
    gd_graph_free(g);
    gd_ctx_free(ctx);
    return NULL;
}

static void check_run(const char *run, const job *j, const job *want)
{
    if (j->err[0] != '\0') {
        printf("FAIL %s: %s\n", run, j->err);
        failures++;
        return;
    }
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&j->loss[s], &want->loss[s], sizeof(float)) != 0) {
            printf("FAIL %s: %s step %d loss %.9g, %.9g when trained alone\n", run, j->model, s + 1, j->loss[s],
                   want->loss[s]);
            failures++;
            return;
        }
}

/* Both jobs at once, one thread each. */
static void concurrently(job *a, job *b)
{
    pthread_t ta, tb;
    int ok_a = pthread_create(&ta, NULL, train, a) == 0, ok_b = pthread_create(&tb, NULL, train, b) == 0;
    if (ok_a) pthread_join(ta, NULL);
    if (ok_b) pthread_join(tb, NULL);
    if (!ok_a || !ok_b) {
        printf("FAIL: pthread_create\n");
        failures++;
    }
}

int main(void)
{
    gd_ctx *ctx = NULL;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK) return 1;
    int have_cpu = 0;
    for (int i = 0; i < gd_backend_count(ctx); i++) have_cpu |= strcmp(gd_backend_name(ctx, i), "cpu") == 0;
    if (!have_cpu) {
        printf("SKIP: no cpu backend in this build\n");
        gd_ctx_free(ctx);
        return 77;
    }
    gd_dataset data;
    if (gd_dataset_shapes(ctx, (int64_t)STEPS * BATCH, 7, &data) != GD_OK) {
        printf("FAIL: shapes: %s\n", gd_ctx_error(ctx));
        gd_ctx_free(ctx);
        return 1;
    }
    gd_ctx_free(ctx);

    /* different thread counts, so that the instances' settings differ as well */
    job cnn = {.model = "cnn", .seed = 11, .threads = 2, .data = &data};
    job mlp = {.model = "mlp", .seed = 12, .threads = 3, .data = &data};
    train(&cnn);
    train(&mlp);
    job cnn_alone = cnn, mlp_alone = mlp;
    check_run("sequential", &cnn_alone, &cnn_alone);
    check_run("sequential", &mlp_alone, &mlp_alone);
    if (failures == 0) {
        /* the first steps must have moved the model: a run that computed nothing would
         * repeat its losses just as well */
        int moved = 0;
        for (int s = 1; s < STEPS; s++) moved |= cnn_alone.loss[s] != cnn_alone.loss[0];
        if (!moved) {
            printf("FAIL: the CNN's loss did not change over %d steps\n", STEPS);
            failures++;
        }
    }

    job c1 = cnn, m1 = mlp;
    concurrently(&c1, &m1);
    check_run("concurrent", &c1, &cnn_alone);
    check_run("concurrent", &m1, &mlp_alone);

    /* the same model in both threads, with the thread counts swapped */
    job c2 = cnn, c3 = cnn;
    c3.threads = 1;
    concurrently(&c2, &c3);
    check_run("two cnn (2 threads)", &c2, &cnn_alone);
    check_run("two cnn (1 thread)", &c3, &cnn_alone);

    gd_dataset_free(&data);
    if (failures == 0) printf("test_threads: ok (%d steps of cnn and mlp, alone and at once)\n", STEPS);
    return failures != 0;
}
