/* bench_profile.c — what profiling costs: the CNN training step with profiling off and on,
 * and the cost per node of a chain of tiny nodes, where the per-node hooks are all there
 * is. Prints the method with the figures.
 *
 *     bench_profile [--backend NAME] [--batch N] [--rounds N] [--steps N] [--trace FILE]
 *
 * Method: the step is docs/profiling.md's: gd_nn_cnn on the shapes (28x28), cross-entropy,
 * backward, AdamW; one step writes the batch, runs the program and reads the loss and the
 * predictions (which waits for a device). After 5 warm-up steps, `rounds` rounds each time
 * `steps` steps with profiling off and `steps` with it on, in alternating order, so that
 * drift (clock, other load) reaches both alike; a block's figure is its mean step time.
 * The cost is the median over rounds of each round's on/off ratio (the two blocks of a
 * round ran back to back), printed beside the ratio of the medians. A profiled block starts a profile
 * before its first step and stops it (writing the trace) after its last: the writing is
 * timed apart, since it happens once per profile, not per step. Device spans are collected
 * when enough launches are pending, so with enough steps per block the cost of collecting
 * is inside the steps (the GPU script uses long blocks for that). */
#define _POSIX_C_SOURCE 200809L
#include "gradus_classifier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static gd_ctx *ctx;

static void die(const char *what)
{
    fprintf(stderr, "bench_profile: %s: %s\n", what, gd_ctx_error(ctx));
    exit(1);
}

typedef struct step {
    gd_graph *g;
    gd_tensor *x, *y, *loss, *pred;
    gd_program *prog;
    float *xb;
    int32_t *yb;
    int64_t *pb;
    int64_t batch;
} step;

static void build(step *s, int64_t batch, const gd_dataset *d)
{
    s->batch = batch;
    s->g = gd_graph_new(ctx);
    s->x = gd_input(s->g, "images", GD_F32, 4, (int64_t[]){batch, 1, 28, 28});
    s->y = gd_input(s->g, "labels", GD_I32, 1, (int64_t[]){batch});
    gd_tensor *logits = gd_nn_cnn(s->x);
    s->loss = gd_cross_entropy(logits, s->y, -1);
    s->pred = gd_argmax(logits, 1, 0);
    if (s->loss == NULL || s->pred == NULL) die("building the CNN");
    if (gd_backward(s->g, s->loss) != GD_OK) die("backward");
    if (gd_optimizer_adamw(s->g, &(gd_adamw_config){.lr = 1e-3}) != GD_OK) die("optimizer");
    if (gd_graph_init_params(s->g, 1) != GD_OK) die("init");
    s->prog = gd_compile(s->g, 2, (gd_tensor *[]){s->loss, s->pred}, GD_COMPILE_UPDATES);
    if (s->prog == NULL) die("compile");
    s->xb = malloc(sizeof(float) * (size_t)(batch * 784));
    s->yb = malloc(sizeof(int32_t) * (size_t)batch);
    s->pb = malloc(sizeof(int64_t) * (size_t)batch);
    for (int64_t i = 0; i < batch; i++) {
        int64_t e = i % d->n;
        memcpy(s->xb + i * 784, d->images + e * 784, 784 * sizeof(float));
        s->yb[i] = d->labels[e];
    }
}

static void run_step(step *s)
{
    float loss;
    if (gd_tensor_write(s->x, s->xb, sizeof(float) * (size_t)(s->batch * 784)) != GD_OK ||
        gd_tensor_write(s->y, s->yb, sizeof(int32_t) * (size_t)s->batch) != GD_OK || gd_program_run(s->prog) != GD_OK ||
        gd_tensor_read(s->loss, &loss, sizeof loss) != GD_OK ||
        gd_tensor_read(s->pred, s->pb, sizeof(int64_t) * (size_t)s->batch) != GD_OK)
        die("training step");
    if (!isfinite(loss)) die("the loss is not finite");
}

/* Mean ms per step of `steps` steps. */
static double block(step *s, int steps)
{
    double t0 = now_ms();
    for (int i = 0; i < steps; i++) run_step(s);
    return (now_ms() - t0) / steps;
}

int main(int argc, char **argv)
{
    const char *backend = NULL, *trace = NULL;
    int64_t batch = 64;
    int rounds = 9, steps = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoll(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc) trace = argv[++i];
        else {
            fprintf(stderr, "usage: bench_profile [--backend NAME] [--batch N] [--rounds N] [--steps N] [--trace FILE]\n");
            return 2;
        }
    }
    if (batch < 1 || rounds < 1 || rounds > 1000 || steps < 1) {
        fprintf(stderr, "bench_profile: batch, rounds and steps must be positive\n");
        return 2;
    }
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    if (gd_profile_active(ctx)) {
        fprintf(stderr, "bench_profile: unset GRADUS_PROFILE: the benchmark turns profiling on and off itself\n");
        return 2;
    }
    if (backend != NULL && gd_ctx_use_backend(ctx, backend) != GD_OK) die("backend");
    char tmp[512];
    if (trace == NULL) {
        const char *d = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/bench_profile.%ld.json", d != NULL ? d : "/tmp", (long)getpid());
        trace = tmp;
    }
    gd_dataset data;
    if (gd_dataset_shapes(ctx, 1024, 7, &data) != GD_OK) die("shapes");
    step s;
    build(&s, batch, &data);

    printf("bench_profile: the CNN training step (gd_nn_cnn, batch %lld, 28x28 shapes, AdamW) on %s, %d threads\n",
           (long long)batch, gd_ctx_backend(ctx), gd_ctx_threads(ctx));
    printf("method: 5 warm-up steps; %d rounds of %d steps with profiling off and %d with it on, in alternating\n"
           "order; a step writes the batch, runs, reads loss and predictions; a block's figure is its mean step\n"
           "time; the cost is the median of the rounds' on/off ratios; writing the trace (once per profile) is\n"
           "timed apart\n",
           rounds, steps, steps);
    for (int i = 0; i < 5; i++) run_step(&s);
    double *off = malloc(sizeof(double) * (size_t)rounds), *on = malloc(sizeof(double) * (size_t)rounds);
    double *write_ms = malloc(sizeof(double) * (size_t)rounds);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int profiled = (r + k) % 2; /* alternate which comes first */
            if (!profiled) {
                off[r] = block(&s, steps);
                continue;
            }
            if (gd_profile_start(ctx, trace) != GD_OK) die("profile start");
            on[r] = block(&s, steps);
            double t0 = now_ms();
            if (gd_profile_stop(ctx) != GD_OK) die("profile stop");
            write_ms[r] = now_ms() - t0;
        }
    }
    /* each round's blocks ran back to back: their ratio cancels what drifts between rounds */
    double *ratio = malloc(sizeof(double) * (size_t)rounds);
    for (int r = 0; r < rounds; r++) ratio[r] = on[r] / off[r] - 1;
    double moff = median(off, rounds), mon = median(on, rounds), mw = median(write_ms, rounds);
    double mratio = median(ratio, rounds);
    printf("%-26s %10s %10s %10s\n", "", "median", "min", "max");
    printf("%-26s %10.3f %10.3f %10.3f  ms/step\n", "profiling off", moff, off[0], off[rounds - 1]);
    printf("%-26s %10.3f %10.3f %10.3f  ms/step\n", "profiling on", mon, on[0], on[rounds - 1]);
    printf("%-26s %+9.2f%%  (median of the rounds' on/off ratios; of the medians: %+.2f%%; the budget is 5%%)\n",
           "cost of profiling", 100.0 * mratio, 100.0 * (mon - moff) / moff);
    free(ratio);
    struct stat st;
    long long bytes = stat(trace, &st) == 0 ? (long long)st.st_size : -1;
    printf("%-26s %10.1f ms for %d steps (%.2f MB; %s)\n", "writing the trace", mw, steps, (double)bytes / 1e6, trace);

    /* A chain of tiny nodes: launches are all there is, so the per-node hooks show. */
    enum { CHAIN = 200 };
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_F32, 1, (int64_t[]){1}), *y = x;
    for (int i = 0; i < CHAIN; i++) y = gd_scale(y, 1.0001, 0.0);
    gd_program *p = gd_compile(g, 1, &y, 0);
    float one = 1;
    if (p == NULL || gd_tensor_write(x, &one, sizeof one) != GD_OK) die("the chain");
    int runs = 200;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int profiled = (r + k) % 2;
            if (profiled && gd_profile_start(ctx, trace) != GD_OK) die("profile start");
            gd_ctx_synchronize(ctx);
            double t0 = now_ms();
            for (int i = 0; i < runs; i++)
                if (gd_program_run(p) != GD_OK) die("chain run");
            gd_ctx_synchronize(ctx);
            double us = (now_ms() - t0) * 1e3 / runs;
            if (profiled) {
                on[r] = us;
                if (gd_profile_stop(ctx) != GD_OK) die("profile stop");
            } else {
                off[r] = us;
            }
        }
    }
    moff = median(off, rounds);
    mon = median(on, rounds);
    printf("a chain of %d scale nodes on f32[1], %d runs a block: off %.2f us/run, on %.2f us/run: %.0f ns per node "
           "while profiling\n", CHAIN, runs, moff, mon, (mon - moff) * 1e3 / CHAIN);
    remove(trace);
    free(off);
    free(on);
    free(write_ms);
    gd_program_free(p);
    gd_graph_free(g);
    gd_program_free(s.prog);
    gd_graph_free(s.g);
    free(s.xb);
    free(s.yb);
    free(s.pb);
    gd_dataset_free(&data);
    gd_ctx_free(ctx);
    return 0;
}
