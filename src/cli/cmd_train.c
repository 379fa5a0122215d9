/* cmd_train.c — `gradus train mlp|cnn`: trains a classifier and prints its test accuracy.
 *
 * Data comes from a directory of IDX files as Debian's dataset-fashion-mnist installs
 * them, or from the procedural shapes dataset (`--data shapes`, and whenever no dataset
 * is installed), so that the command works on a bare machine. */
#include "cli.h"
#include "gradus_classifier.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* The shapes run is the project's smoke test (`make run`): one epoch of 24000 takes ~45 s
 * on the naive reference alone and ~10 s on the fast CPU backend, and the CNN ends near
 * 0.95-0.97 test accuracy (fewer examples leave it under 0.9). */
#define SHAPES_TRAIN 24000
#define SHAPES_TEST 2000
#define SHAPES_SEED_TEST 0x7e57

static void help(FILE *f)
{
    fprintf(f,
            "usage: gradus train mlp|cnn [options]\n"
            "\n"
            "Trains a classifier of 28x28 images and prints its test accuracy.\n"
            "\n"
            "  --data DIR      directory with train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n"
            "                  t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz (gzip or plain);\n"
            "                  \"shapes\" for the procedural shapes dataset\n"
            "                  (default: %s if present, else shapes)\n"
            "  --epochs N      passes over the training set (default: mlp 2, cnn 3; shapes 1)\n"
            "  --batch N       examples per step (default 64)\n"
            "  --lr X          peak learning rate, decayed by a cosine (default 0.002)\n"
            "  --sgd           SGD with momentum 0.9 instead of AdamW\n"
            "  --hidden N      MLP hidden width (default 128)\n"
            "  --seed N        initialization and shuffling seed (default 1)\n"
            "  --backend NAME  run on this backend (default: the highest-priority one)\n"
            "  --threads N     threads for the CPU backends (default: all cores)\n"
            "  --limit N       train on the first N examples only\n"
            "  --metrics FILE  write a metrics log (a JSON object per step) for `gradus plot`\n"
            "  --profile FILE  record a trace of the run (Chrome trace JSON, for Perfetto) and print\n"
            "                  where the time went; GRADUS_PROFILE=FILE does the same\n",
            FASHION_DIR);
}

static int file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f != NULL) fclose(f);
    return f != NULL;
}

/* dir/base.gz if it exists, else dir/base if that does, else dir/base.gz (so that the
 * loader's "cannot open" names the file a user would download). */
static const char *data_file(char *buf, size_t cap, const char *dir, const char *base)
{
    snprintf(buf, cap, "%s/%s", dir, base);
    if (file_exists(buf)) return buf;
    snprintf(buf, cap, "%s/%s.gz", dir, base);
    return buf;
}

static int load_idx_dir(gd_ctx *ctx, const char *dir, gd_dataset *train, gd_dataset *test)
{
    char a[1024], b[1024];
    gd_status st = gd_dataset_load_idx(ctx, data_file(a, sizeof a, dir, "train-images-idx3-ubyte"),
                                       data_file(b, sizeof b, dir, "train-labels-idx1-ubyte"), train);
    if (st == GD_OK)
        st = gd_dataset_load_idx(ctx, data_file(a, sizeof a, dir, "t10k-images-idx3-ubyte"),
                                 data_file(b, sizeof b, dir, "t10k-labels-idx1-ubyte"), test);
    if (st != GD_OK) {
        fprintf(stderr, "gradus train: %s\n", gd_ctx_error(ctx));
        gd_dataset_free(train);
        return 0;
    }
    return 1;
}

typedef struct progress_out {
    int tty;
    int width;        /* of the last \r line, to blank it */
} progress_out;

static void progress(void *user, const gd_train_progress *p)
{
    progress_out *o = user;
    int eta = (int)(p->eta_s + 0.5);
    char line[160];
    int len = snprintf(line, sizeof line, "epoch %d/%d  step %lld/%lld  loss %.4f  acc %.4f  %.0f ex/s  ETA %d:%02d",
                       p->epoch, p->epochs, (long long)p->step, (long long)p->steps, p->loss, p->accuracy,
                       p->examples_per_s, eta / 60, eta % 60);
    if (o->tty) {
        /* Rewrite one line in place; keep it when an epoch ends. */
        printf("\r%s%*s", line, o->width > len ? o->width - len : 0, "");
        o->width = len;
        if (p->epoch_done) {
            printf("\n");
            o->width = 0;
        }
    } else {
        printf("%s\n", line);
    }
    fflush(stdout);
}

/* The options that take a value; any other argument starting with '-' (but --sgd and
 * --help) is unknown, so that "--frob" is not taken for an option missing its value and
 * "-x mlp" does not make "-x" the model. */
static int takes_value(const char *a)
{
    static const char *const valued[] = {"--data", "--backend", "--epochs", "--batch", "--seed",
                                         "--limit", "--hidden",  "--threads", "--lr",
                                         "--metrics", "--profile", NULL};
    return cli_is_one_of(a, valued);
}

int cmd_train(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "lm") == 0) return cmd_train_lm(argc - 1, argv + 1);
    const char *model = NULL, *data = NULL, *backend = NULL, *metrics = NULL, *profile = NULL;
    int64_t epochs = 0, batch = 64, seed = 1, limit = 0, hidden = 128, threads = -1;
    double lr = 0;
    int sgd = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "--sgd") == 0) {
            sgd = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            if (!takes_value(a)) {
                fprintf(stderr, "gradus train: unknown option %s (see gradus train --help)\n", a);
                return 2;
            }
            if ((v = cli_value(argc, argv, &i)) == NULL) return 2;
            if (strcmp(a, "--data") == 0) data = v;
            else if (strcmp(a, "--backend") == 0) backend = v;
            else if (strcmp(a, "--metrics") == 0) metrics = v;
            else if (strcmp(a, "--profile") == 0) profile = v;
            else if (strcmp(a, "--epochs") == 0) ok = cli_int(a, v, 1, 1000, &epochs);
            else if (strcmp(a, "--batch") == 0) ok = cli_int(a, v, 1, 1 << 16, &batch);
            else if (strcmp(a, "--seed") == 0) ok = cli_int(a, v, 0, INT64_MAX, &seed);
            else if (strcmp(a, "--limit") == 0) ok = cli_int(a, v, 1, INT64_MAX, &limit);
            else if (strcmp(a, "--hidden") == 0) ok = cli_int(a, v, 1, 1 << 16, &hidden);
            else if (strcmp(a, "--threads") == 0) ok = cli_int(a, v, 0, 4096, &threads);
            else if (strcmp(a, "--lr") == 0) ok = cli_double(a, v, 1e-9, 100, &lr);
        } else if (model == NULL) {
            model = a;
        } else {
            fprintf(stderr, "gradus train: unexpected argument \"%s\"\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (model == NULL || (strcmp(model, "mlp") != 0 && strcmp(model, "cnn") != 0)) {
        fprintf(stderr, "gradus train: %s%s%s\n\n", model ? "unknown model \"" : "which model? want mlp or cnn",
                model ? model : "", model ? "\" (want mlp or cnn)" : "");
        help(stderr);
        return 2;
    }

    int shapes = data != NULL && strcmp(data, "shapes") == 0;
    if (data == NULL) {
        if (file_exists(FASHION_DIR "/train-images-idx3-ubyte.gz")) {
            data = FASHION_DIR;
        } else {
            printf("no dataset at %s (Debian: apt install dataset-fashion-mnist); using the shapes dataset\n",
                   FASHION_DIR);
            shapes = 1;
        }
    }

    gd_ctx *ctx = cli_ctx(backend);
    if (ctx == NULL) return 1;
    if (threads >= 0) gd_ctx_set_threads(ctx, (int)threads);
    /* a trace that cannot be written costs the trace, never the training */
    int profile_ok = cli_profile_start(ctx, "train", profile);

    gd_dataset train = {0}, test = {0};
    if (shapes) {
        int64_t n = limit > 0 ? limit : SHAPES_TRAIN;
        gd_status st = gd_dataset_shapes(ctx, n, (uint64_t)seed, &train);
        if (st == GD_OK) st = gd_dataset_shapes(ctx, SHAPES_TEST, (uint64_t)seed ^ SHAPES_SEED_TEST, &test);
        if (st != GD_OK) {
            fprintf(stderr, "gradus train: %s\n", gd_ctx_error(ctx));
            gd_dataset_free(&train);
            gd_ctx_free(ctx);
            return 1;
        }
    } else if (!load_idx_dir(ctx, data, &train, &test)) {
        gd_ctx_free(ctx);
        return 1;
    }
    if (epochs == 0) epochs = shapes ? 1 : strcmp(model, "cnn") == 0 ? 3 : 2;

    progress_out po = {isatty(fileno(stdout)), 0};
    gd_train_config cfg = {
        .model = model, .hidden = hidden, .epochs = (int)epochs, .batch = batch, .lr = lr, .sgd = sgd,
        .seed = (uint64_t)seed, .limit = limit, .progress = progress, .user = &po,
        /* A terminal line is rewritten in place; a log gets a line a second. */
        .report_every_s = po.tty ? 0.25 : 1.0, .metrics = metrics,
    };
    int64_t n_train = limit > 0 && limit < train.n ? limit : train.n;
    printf("training %s on %s: %lld training and %lld test images of %lldx%lld\n", model,
           shapes ? "shapes" : data, (long long)n_train, (long long)test.n, (long long)train.h, (long long)train.w);
    printf("backend %s, batch %lld, %lld epoch%s, %s lr %g with cosine decay, seed %lld\n",
           gd_ctx_backend(ctx), (long long)batch, (long long)epochs, epochs == 1 ? "" : "s",
           sgd ? "SGD" : "AdamW", lr > 0 ? lr : sgd ? 0.05 : 2e-3, (long long)seed);
    if (metrics != NULL) printf("metrics log: %s (draw it: gradus plot %s -o curves.svg)\n", metrics, metrics);
    fflush(stdout);

    gd_train_result r;
    gd_status st = gd_train_classifier(ctx, &train, &test, &cfg, &r);
    int rc = 0;
    if (st != GD_OK) {
        if (po.width > 0) printf("\n");
        fprintf(stderr, "gradus train: %s\n", gd_ctx_error(ctx));
        rc = 1;
    } else {
        printf("trained %lld steps in %.1f s (%.0f examples/s); evaluated %lld test images in %.1f s\n",
               (long long)r.steps, r.train_s, r.examples_per_s, (long long)test.n, r.eval_s);
        if (r.saw_nan) {
            fprintf(stderr, "gradus train: the loss became NaN at step %lld; training stopped\n", (long long)r.steps);
            rc = 1;
        }
        printf("test accuracy: %.4f\n", r.test_accuracy);
        if (r.metrics_failed) {
            fprintf(stderr, "gradus train: writing the metrics log %s failed part way; it is incomplete\n", metrics);
            rc = 1;
        } else if (metrics != NULL) {
            printf("metrics log written to %s\n", metrics);
        }
    }
    if (!cli_profile_finish(ctx, "train") || !profile_ok) rc = 1;
    gd_dataset_free(&train);
    gd_dataset_free(&test);
    gd_ctx_free(ctx);
    return rc;
}
