/* gradus_classifier.h — image classification on top of gradus.h: the demo datasets
 * (IDX files such as Fashion-MNIST, and procedurally drawn shapes), the MLP and CNN
 * classifiers, and the loop that trains and evaluates them (what `gradus train mlp|cnn`
 * runs). None of it is needed to use the library.
 */
#ifndef GRADUS_CLASSIFIER_H
#define GRADUS_CLASSIFIER_H

#include "gradus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- models ----------------------------------------------------------------------------- */

/* Classifiers for (N, 1, 28, 28) images: return logits (N, 10). */
gd_tensor *gd_nn_mlp(gd_tensor *images, int64_t hidden);
gd_tensor *gd_nn_cnn(gd_tensor *images);

/* ---- data ------------------------------------------------------------------------------- */

typedef struct gd_dataset {
    int64_t n;          /* examples */
    int64_t h, w;       /* image size */
    float *images;      /* n*h*w, scaled to [0, 1] */
    int32_t *labels;    /* n */
    int32_t classes;
} gd_dataset;

/* Reads an IDX image file and its label file, gzip-compressed or not. The message of a
 * failure names the file and what was wrong with it. */
gd_status gd_dataset_load_idx(gd_ctx *ctx, const char *images_path, const char *labels_path, gd_dataset *out);
/* Draws n 28x28 images of simple shapes in 10 classes (procedurally, from seed; label
 * i % 10, so classes are balanced and a prefix of a larger set equals a smaller set). */
gd_status gd_dataset_shapes(gd_ctx *ctx, int64_t n, uint64_t seed, gd_dataset *out);
void gd_dataset_free(gd_dataset *d);
/* A permutation of 0..n-1 from seed (epoch shuffling). */
void gd_shuffle(int64_t *idx, int64_t n, uint64_t seed);

/* ---- training the classifiers ----------------------------------------------------------- */

/* What the progress callback sees. Loss and accuracy are over the training batches since
 * the previous report, so they move with the model rather than average its history. */
typedef struct gd_train_progress {
    int epoch, epochs;          /* 1-based */
    int64_t step, steps;        /* within the epoch, 1-based */
    int64_t examples;           /* trained on so far, over all epochs */
    double loss, accuracy;
    double examples_per_s;      /* over the whole run so far */
    double elapsed_s, eta_s;
    int epoch_done;             /* the last report of an epoch */
} gd_train_progress;

typedef struct gd_train_config {
    const char *model;          /* "mlp" or "cnn" */
    int64_t hidden;             /* MLP width; 0: 128 */
    int epochs;                 /* 0: 1 */
    int64_t batch;              /* 0: 64 */
    double lr;                  /* peak learning rate; 0: 2e-3 (AdamW), 0.05 (SGD) */
    double weight_decay;        /* decoupled (AdamW) or L2 (SGD); 0 is allowed */
    int sgd;                    /* 1: SGD with momentum 0.9 instead of AdamW */
    int constant_lr;            /* 1: no cosine decay of the learning rate */
    uint64_t seed;              /* parameter init and shuffling */
    int64_t limit;              /* train on the first `limit` examples only; 0: all */
    /* Called at most every report_every_s seconds (0: 0.25) and at the end of each epoch. */
    void (*progress)(void *user, const gd_train_progress *p);
    void *user;
    double report_every_s;
    /* A metrics log to write, or NULL: one JSON object per line, one line per step
     * ({"step", "epoch", "loss", "accuracy", "lr", "examples_per_s", "elapsed_s"}) and a
     * last one with "test_accuracy"; `gradus plot` draws it. A file that cannot be created
     * fails the call before training (GD_ERR_IO); one that fails later stops being written
     * and shows in gd_train_result.metrics_failed. */
    const char *metrics;
} gd_train_config;

typedef struct gd_train_result {
    double test_accuracy;       /* on the test set, by argmax of the logits */
    double train_loss;          /* mean over the last epoch */
    double train_accuracy;      /* over the last epoch, as the weights changed */
    int saw_nan;                /* a loss was NaN or infinite; training stopped there */
    int64_t steps;
    double train_s, eval_s;     /* wall time of training and of the test evaluation */
    double examples_per_s;      /* training throughput */
    int metrics_failed;         /* writing the metrics log failed part way (it is incomplete) */
} gd_train_result;

/* Builds the model on a fresh graph of ctx (cross-entropy loss, backward pass, optimizer),
 * trains it on `train` with shuffled batches for cfg->epochs, and measures accuracy on
 * `test` with a forward-only program of the same graph. The last, partial batch of an
 * epoch is padded and its padding ignored by the loss. Images must be (h, w) the same in
 * both datasets and labels below 10. A NaN loss is not an error: it stops training and
 * shows in out->saw_nan. While ctx records a profile (gd_profile_start), each step is a
 * span "train step" holding "load batch", and examples/s is a counter. */
gd_status gd_train_classifier(gd_ctx *ctx, const gd_dataset *train, const gd_dataset *test,
                              const gd_train_config *cfg, gd_train_result *out);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_CLASSIFIER_H */
