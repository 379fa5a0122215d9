/* The CNN trains through the test device — a backend with four kernels, every other op
 * falling back across copies — to the accuracy it reaches without it. Same seed, same
 * data, one epoch on a subset (Fashion-MNIST when installed, else the shapes). */
#include "core.h"
#include "gradus_classifier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static int load(gd_ctx *ctx, gd_dataset *train, gd_dataset *test, int quick)
{
    FILE *f = fopen(FASHION_DIR "/train-images-idx3-ubyte.gz", "rb");
    if (f != NULL && !quick) {
        fclose(f);
        gd_status st = gd_dataset_load_idx(ctx, FASHION_DIR "/train-images-idx3-ubyte.gz",
                                           FASHION_DIR "/train-labels-idx1-ubyte.gz", train);
        if (st == GD_OK)
            st = gd_dataset_load_idx(ctx, FASHION_DIR "/t10k-images-idx3-ubyte.gz", FASHION_DIR "/t10k-labels-idx1-ubyte.gz",
                                     test);
        printf("data: Fashion-MNIST\n");
        return st == GD_OK;
    }
    if (f != NULL) fclose(f);
    printf("data: shapes\n");
    return gd_dataset_shapes(ctx, quick ? 1000 : 6000, 21, train) == GD_OK &&
           gd_dataset_shapes(ctx, quick ? 300 : 1000, 22, test) == GD_OK;
}

static double train(gd_ctx *ctx, const gd_dataset *tr, const gd_dataset *te, int64_t limit, int *nan)
{
    gd_train_config cfg = {.model = "cnn", .epochs = 1, .batch = 64, .lr = 2e-3, .seed = 5, .limit = limit};
    gd_train_result r;
    if (gd_train_classifier(ctx, tr, te, &cfg, &r) != GD_OK) {
        printf("FAIL: training on %s: %s\n", gd_ctx_backend(ctx), gd_ctx_error(ctx));
        return -1;
    }
    *nan = r.saw_nan;
    printf("%-8s test accuracy %.4f in %.1f s (%lld steps)\n", gd_ctx_backend(ctx), r.test_accuracy, r.train_s,
           (long long)r.steps);
    return r.test_accuracy;
}

int main(void)
{
    const char *q = getenv("GRADUS_TEST_QUICK");
    int quick = q != NULL && strcmp(q, "1") == 0;
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .plugin_path = ""}) != GD_OK) return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/plugins-test/libgradus_testdev.so", GD_BUILD_DIR);
    if (gd_plugin_load_file(ctx, path) != GD_OK) {
        printf("FAIL: %s\n", gd_ctx_error(ctx));
        return 1;
    }
    gd_dataset tr, te;
    if (!load(ctx, &tr, &te, quick)) {
        printf("FAIL: data: %s\n", gd_ctx_error(ctx));
        return 1;
    }
    int64_t limit = quick ? 1000 : 12000;
    /* without the device: the fastest host backend */
    gd_ctx_use_backend(ctx, gd_backend_count(ctx) > 2 ? "cpu" : "ref");
    int nan_a = 0, nan_b = 0;
    double a = train(ctx, &tr, &te, limit, &nan_a);
    gd_ctx_use_backend(ctx, "testdev");
    double b = train(ctx, &tr, &te, limit, &nan_b);
    int fails = 0;
    if (a < 0 || b < 0 || nan_a || nan_b) fails++;
    if (fabs(a - b) > 0.01) {
        printf("FAIL: accuracy through testdev %.4f vs %.4f without it\n", b, a);
        fails++;
    }
    if (!quick && b < 0.75) {
        printf("FAIL: accuracy %.4f through testdev after one epoch on %lld examples, want >= 0.75\n", b, (long long)limit);
        fails++;
    }
    gd_dataset_free(&tr);
    gd_dataset_free(&te);
    gd_ctx_free(ctx);
    printf("%s\n", fails ? "FAILED" : "ok");
    return fails != 0;
}
