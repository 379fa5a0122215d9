/* train_mlp.c — train a 784-128-128-10 MLP for one epoch and measure its test accuracy,
 * using nothing but gradus.h.
 *
 *     train_mlp [DIR]    DIR holds Fashion-MNIST's four IDX files (gzip or not);
 *                        without it, or if they fail to load, the procedural shapes. */
#include "gradus_classifier.h"

#include <stdio.h>
#include <string.h>

enum { B = 64 }; /* programs are planned for fixed shapes: every batch has B rows */

static int load(gd_ctx *ctx, const char *dir, gd_dataset *train, gd_dataset *test)
{
    char p[4][512];
    const char *base[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"};
    for (int i = 0; i < 4; i++) snprintf(p[i], sizeof p[i], "%s/%s.gz", dir, base[i]);
    if (gd_dataset_load_idx(ctx, p[0], p[1], train) == GD_OK && gd_dataset_load_idx(ctx, p[2], p[3], test) == GD_OK)
        return 1;
    fprintf(stderr, "%s\nfalling back to the shapes dataset\n", gd_ctx_error(ctx));
    gd_dataset_free(train);
    return 0;
}

int main(int argc, char **argv)
{
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    gd_dataset train, test;
    if (argc < 2 || !load(ctx, argv[1], &train, &test)) {
        gd_dataset_shapes(ctx, 10000, 1, &train);
        gd_dataset_shapes(ctx, 2000, 2, &test);
    }
    int64_t hw = train.h * train.w;
    if (hw != 28 * 28 || train.n > 70000) return fprintf(stderr, "want at most 70000 28x28 images\n"), 1;

    /* The model, its loss, the backward pass and AdamW's updates, all in one graph. */
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){B, 1, train.h, train.w});
    gd_tensor *y = gd_input(g, "y", GD_I32, 1, (int64_t[]){B});
    gd_tensor *logits = gd_nn_mlp(x, 128);
    gd_tensor *loss = gd_cross_entropy(logits, y, -1);
    gd_tensor *pred = gd_argmax(logits, 1, 0);
    if (loss == NULL || pred == NULL || gd_backward(g, loss) != GD_OK ||
        gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 1e-3}) != GD_OK || gd_graph_init_params(g, 1) != GD_OK) {
        fprintf(stderr, "building the model: %s\n", gd_ctx_error(ctx));
        return 1;
    }
    gd_program *step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES); /* trains */
    gd_program *eval = gd_compile(g, 1, &pred, 0);                  /* only predicts */
    if (step == NULL || eval == NULL) {
        fprintf(stderr, "compiling: %s\n", gd_ctx_error(ctx));
        return 1;
    }

    static float xb[B * 28 * 28];
    int32_t yb[B];
    int64_t idx[70000], pb[B]; /* idx: room for the whole of MNIST-sized sets */
    gd_shuffle(idx, train.n, 1);
    for (int64_t s = 0; s + B <= train.n; s += B) { /* one epoch, dropping the last partial batch */
        for (int j = 0; j < B; j++) {
            memcpy(xb + j * hw, train.images + idx[s + j] * hw, (size_t)hw * sizeof(float));
            yb[j] = train.labels[idx[s + j]];
        }
        float l;
        if (gd_tensor_write(x, xb, sizeof xb) != GD_OK || gd_tensor_write(y, yb, sizeof yb) != GD_OK ||
            gd_program_run(step) != GD_OK || gd_tensor_read(loss, &l, sizeof l) != GD_OK) {
            fprintf(stderr, "step %lld: %s\n", (long long)(s / B), gd_ctx_error(ctx));
            return 1;
        }
        if ((s / B) % 100 == 0) printf("step %4lld  loss %.4f\n", (long long)(s / B), l);
    }

    int64_t correct = 0, seen = 0;
    for (int64_t s = 0; s + B <= test.n; s += B, seen += B) {
        memcpy(xb, test.images + s * hw, sizeof xb);
        if (gd_tensor_write(x, xb, sizeof xb) != GD_OK || gd_program_run(eval) != GD_OK ||
            gd_tensor_read(pred, pb, sizeof pb) != GD_OK) {
            fprintf(stderr, "eval: %s\n", gd_ctx_error(ctx));
            return 1;
        }
        for (int j = 0; j < B; j++) correct += pb[j] == test.labels[s + j];
    }
    printf("test accuracy: %.4f (%lld images)\n", (double)correct / (double)seen, (long long)seen);

    gd_program_free(step);
    gd_program_free(eval);
    gd_graph_free(g);
    gd_dataset_free(&train);
    gd_dataset_free(&test);
    gd_ctx_free(ctx);
    return 0;
}
