/* lm_curve.c — gradus's half of the loss-curve comparison with PyTorch (bench/lm_curve.py).
 *
 *   lm_curve MODEL_DIR BATCHES.safetensors [BACKEND [DTYPE]]
 *
 * MODEL_DIR holds the initial weights (a Hugging Face model directory); BATCHES holds "ids"
 * (S, B, T + 1) i32, the token windows of S steps (each step trains on ids[:, :T] against
 * ids[:, 1:]), "lr" (S) f32, the learning rate of each step, and as metadata AdamW's
 * betas, eps and weight decay and the clipping norm. Trains S steps with AdamW (f32
 * master weights, activations in DTYPE: f32 default, bf16 or f16) and prints the loss of
 * each step, one per line, as "step S loss L". */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gd_ctx *ctx;

static int die(const char *what)
{
    fprintf(stderr, "lm_curve: %s: %s\n", what, gd_ctx_error(ctx));
    return 1;
}

static double meta_num(const gd_st_file *f, const char *key, double def)
{
    const char *v = gd_st_metadata(f, key);
    return v != NULL ? atof(v) : def;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: lm_curve MODEL_DIR BATCHES.safetensors [BACKEND [DTYPE]]\n");
        return 2;
    }
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    if (argc > 3 && gd_ctx_use_backend(ctx, argv[3]) != GD_OK) return die("backend");
    gd_dtype dt = GD_F32;
    if (argc > 4 && !gd_dtype_parse(argv[4], &dt)) return 2;
    gd_lm_config cfg;
    if (gd_lm_model_config(ctx, argv[1], &cfg) != GD_OK) return die(argv[1]);
    gd_st_file *f = NULL;
    if (gd_st_open(ctx, argv[2], &f) != GD_OK) return die(argv[2]);
    gd_dtype idt, ldt;
    int nd, lnd;
    int64_t shape[GD_MAX_DIMS], lshape[GD_MAX_DIMS];
    const void *idsp, *lrp;
    size_t bytes, lbytes;
    if (!gd_st_find(f, "ids", &idt, &nd, shape, &idsp, &bytes) || idt != GD_I32 || nd != 3 ||
        !gd_st_find(f, "lr", &ldt, &lnd, lshape, &lrp, &lbytes) || ldt != GD_F32 || lnd != 1 || lshape[0] != shape[0]) {
        fprintf(stderr, "lm_curve: %s: want \"ids\" (S, B, T + 1) i32 and \"lr\" (S) f32\n", argv[2]);
        return 1;
    }
    int64_t S = shape[0], B = shape[1], T = shape[2] - 1;
    const int32_t *ids = idsp;
    const float *lr = lrp;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T}), *y = gd_input(g, "targets", GD_I32, 2, (int64_t[]){B, T});
    gd_tensor *loss = gd_lm_forward_loss(g, &cfg, x, y, dt, GD_LM_FLOAT);
    if (loss == NULL || gd_backward(g, loss) != GD_OK) return die("model");
    gd_adamw_config oc = {.lr = lr[0] > 0 ? lr[0] : 1e-3, .beta1 = meta_num(f, "beta1", 0.9),
                          .beta2 = meta_num(f, "beta2", 0.95), .eps = meta_num(f, "eps", 1e-8),
                          .weight_decay = meta_num(f, "weight_decay", 0.0), .clip_norm = meta_num(f, "clip", 0.0)};
    if (gd_optimizer_adamw(g, &oc) != GD_OK) return die("optimizer");
    gd_program *step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
    if (step == NULL) return die("compile");
    if (gd_lm_checkpoint_load(ctx, g, &cfg, argv[1], 0, NULL) != GD_OK) return die("weights");
    int32_t *bx = malloc(sizeof *bx * (size_t)(B * T)), *by = malloc(sizeof *by * (size_t)(B * T));
    if (bx == NULL || by == NULL) return 1;
    for (int64_t s = 0; s < S; s++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                const int32_t *w = ids + (s * B + b) * (T + 1);
                bx[b * T + t] = w[t];
                by[b * T + t] = w[t + 1];
            }
        float l = 0;
        if (gd_tensor_write(x, bx, sizeof *bx * (size_t)(B * T)) != GD_OK ||
            gd_tensor_write(y, by, sizeof *by * (size_t)(B * T)) != GD_OK || gd_optimizer_set_lr(g, lr[s]) != GD_OK ||
            gd_program_run(step) != GD_OK || gd_tensor_read(loss, &l, sizeof l) != GD_OK)
            return die("step");
        printf("step %lld loss %.6f\n", (long long)s, (double)l);
        fflush(stdout);
    }
    free(bx);
    free(by);
    gd_program_free(step);
    gd_graph_free(g);
    gd_st_close(f);
    gd_ctx_free(ctx);
    return 0;
}
