/* lm_parity.c — gradus's half of the parity check against PyTorch (bench/lm_parity.py).
 *
 *   lm_parity MODEL_DIR BATCH.safetensors OUT.safetensors [BACKEND]
 *
 * MODEL_DIR is a Hugging Face model directory (config.json, model.safetensors) that
 * `transformers` wrote; BATCH holds "ids" (B, T) i32 and, as metadata, the AdamW settings
 * and the number of steps. OUT gets, in f32: "logits" (B, T, V), "loss" (), "grad.<name>"
 * for every parameter (all of the first forward and backward pass), and "losses" (steps)
 * from that many AdamW steps on the same batch. The loss is a causal LM's: token t
 * predicts token t + 1, the last position has no target — what transformers computes
 * when given labels = ids. */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gd_ctx *ctx;

static int die(const char *what)
{
    fprintf(stderr, "lm_parity: %s: %s\n", what, gd_ctx_error(ctx));
    return 1;
}

static double meta_num(const gd_st_file *f, const char *key, double def)
{
    const char *v = gd_st_metadata(f, key);
    return v != NULL ? atof(v) : def;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: lm_parity MODEL_DIR BATCH.safetensors OUT.safetensors [BACKEND]\n");
        return 2;
    }
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    if (argc > 4 && gd_ctx_use_backend(ctx, argv[4]) != GD_OK) return die("backend");
    char path[4096];
    gd_lm_config cfg;
    snprintf(path, sizeof path, "%s/config.json", argv[1]);
    if (gd_lm_config_read(ctx, path, &cfg) != GD_OK || gd_lm_config_check(ctx, &cfg) != GD_OK) return die("config");
    gd_st_file *batch = NULL;
    if (gd_st_open(ctx, argv[2], &batch) != GD_OK) return die("batch");
    gd_dtype dt;
    int nd;
    int64_t shape[GD_MAX_DIMS];
    const void *idsp;
    size_t bytes;
    if (!gd_st_find(batch, "ids", &dt, &nd, shape, &idsp, &bytes) || dt != GD_I32 || nd != 2) {
        fprintf(stderr, "lm_parity: %s: no (B, T) i32 tensor \"ids\"\n", argv[2]);
        return 1;
    }
    int64_t B = shape[0], T = shape[1], V = cfg.vocab_size, steps = (int64_t)meta_num(batch, "steps", 0);
    const int32_t *ids = idsp;
    int32_t *tg = malloc(sizeof *tg * (size_t)(B * T));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) tg[b * T + t] = t + 1 < T ? ids[b * T + t + 1] : -1;

    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T}), *y = gd_input(g, "targets", GD_I32, 2, (int64_t[]){B, T});
    gd_tensor *logits = gd_lm_forward(g, &cfg, x, NULL, GD_F32), *loss = gd_lm_loss(logits, y);
    if (loss == NULL || gd_backward(g, loss) != GD_OK) return die("model");
    int np = gd_graph_param_count(g);
    gd_tensor **targets = calloc((size_t)np + 2, sizeof *targets);
    targets[0] = logits;
    targets[1] = loss;
    for (int i = 0; i < np; i++) targets[2 + i] = gd_grad(g, gd_graph_param(g, i));
    gd_program *p = gd_compile(g, np + 2, targets, 0);
    if (p == NULL) return die("compile");
    if (gd_lm_checkpoint_load(ctx, g, &cfg, argv[1], 0, NULL) != GD_OK) return die("weights");
    if (gd_tensor_write(x, ids, bytes) != GD_OK || gd_tensor_write(y, tg, bytes) != GD_OK) return die("batch");
    if (gd_program_run(p) != GD_OK) return die("run");

    /* read everything before another program runs */
    gd_st_entry *e = calloc((size_t)np + 3, sizeof *e);
    char **names = calloc((size_t)np + 3, sizeof *names);
    int n = 0;
    for (int i = 0; i < np + 2; i++) {
        gd_tensor *t = targets[i];
        if (t == NULL) continue;
        size_t tb = (size_t)gd_tensor_numel(t) * sizeof(float);
        void *buf = malloc(tb ? tb : 1);
        if (gd_tensor_read(t, buf, tb) != GD_OK) return die("read");
        names[n] = malloc(512);
        if (i == 0) snprintf(names[n], 512, "logits");
        else if (i == 1) snprintf(names[n], 512, "loss");
        else snprintf(names[n], 512, "grad.%s", gd_tensor_name(gd_graph_param(g, i - 2)));
        e[n] = (gd_st_entry){.name = names[n], .dtype = GD_F32, .ndim = gd_tensor_ndim(t), .data = buf};
        for (int k = 0; k < e[n].ndim; k++) e[n].shape[k] = gd_tensor_dim(t, k);
        n++;
    }
    (void)V;
    float *losses = calloc((size_t)steps + 1, sizeof *losses);
    if (steps > 0) {
        gd_adamw_config oc = {.lr = meta_num(batch, "lr", 1e-3), .beta1 = meta_num(batch, "beta1", 0.9),
                              .beta2 = meta_num(batch, "beta2", 0.999), .eps = meta_num(batch, "eps", 1e-8),
                              .weight_decay = meta_num(batch, "weight_decay", 0.0)};
        if (gd_optimizer_adamw(g, &oc) != GD_OK) return die("optimizer");
        gd_program *step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
        if (step == NULL) return die("compile the step");
        for (int64_t s = 0; s < steps; s++)
            if (gd_program_run(step) != GD_OK || gd_tensor_read(loss, &losses[s], sizeof(float)) != GD_OK)
                return die("step");
        e[n] = (gd_st_entry){.name = "losses", .dtype = GD_F32, .ndim = 1, .shape = {steps}, .data = losses};
        n++;
        gd_program_free(step);
    }
    if (gd_st_write(ctx, argv[3], e, n, NULL, NULL, 0) != GD_OK) return die("write");
    printf("lm_parity: %s on %s: %d tensors, loss %.6f%s\n", argv[1], gd_ctx_backend(ctx), n,
           *(const float *)e[1].data, steps > 0 ? "" : "");
    gd_program_free(p);
    gd_graph_free(g);
    gd_st_close(batch);
    gd_ctx_free(ctx);
    return 0;
}
