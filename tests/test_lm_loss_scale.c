/* Loss scaling in language-model training (gd_loss_scale_config), on the CPU with a tiny
 * llama: f16 with dynamic scaling follows f32's losses; a power-of-two scale in f32 changes
 * no bit; an absurd scale makes every step overflow, each skipped with the weights, the
 * moments and AdamW's step count bitwise as they were and the scale halved; good steps
 * grow it; a run stopped and resumed continues identically, scale and skips included; a
 * data-parallel job of one rank decides as one process does; bad settings and a bad saved
 * scaler state are refused by name. */
#include "gradus_dist.h"
#include "gradus_lm.h"
#include "testutil.h"
#include "io/lm_checkpoint.h"

#include <stdlib.h>
#include <sys/stat.h>

static char dir[256];

static const char *path_of(const char *name) { return tu_path(dir, name); }

#define MAX_STEPS 32

typedef struct run {
    int n;
    double loss[MAX_STEPS], scale[MAX_STEPS], norm[MAX_STEPS];
    int64_t skipped[MAX_STEPS];
    int skip[MAX_STEPS];
} run;

static void on_progress(void *user, const gd_lm_progress *p)
{
    run *r = user;
    if (p->step < 1 || p->step > MAX_STEPS) return;
    int i = (int)p->step - 1;
    r->loss[i] = p->loss;
    r->scale[i] = p->loss_scale;
    r->norm[i] = p->grad_norm;
    r->skipped[i] = p->skipped_steps;
    r->skip[i] = p->skipped;
    if (p->step > r->n) r->n = (int)p->step;
}

static gd_lm_config model(void)
{
    gd_lm_config c = {.arch = GD_LM_LLAMA, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .hidden_dim = 64,
                      .vocab_size = 320, .max_seq = 32, .rope_theta = 10000, .norm_eps = 1e-5, .tied_embeddings = 1};
    return c;
}

static gd_lm_train_config base(gd_lm_config *m, gd_token_data *d, gd_dtype dt, run *r)
{
    memset(r, 0, sizeof *r);
    gd_lm_train_config c = {.model = *m, .data = d, .steps = 16, .batch = 4, .seq = 16, .lr = 1e-2, .warmup = 2,
                            .clip = 1.0, .weight_decay = 0.01, .seed = 7, .report_every_s = 1e-9, .dtype = dt,
                            .val_batches = 1, .progress = on_progress, .user = r};
    return c;
}

/* Every parameter of a checkpoint equals, bit for bit, its value at initialization. */
static int weights_initial(const gd_lm_config *m, uint64_t seed, const char *ckpt)
{
    gd_graph *a = gd_graph_new(ctx), *b = gd_graph_new(ctx);
    gd_tensor *ia = gd_input(a, "ids", GD_I32, 2, (int64_t[]){1, 4}), *ib = gd_input(b, "ids", GD_I32, 2, (int64_t[]){1, 4});
    gd_lm_forward(a, m, ia, NULL, GD_F32);
    gd_lm_forward(b, m, ib, NULL, GD_F32);
    int same = gd_graph_init_params(a, seed) == GD_OK && gd_lm_checkpoint_load(ctx, b, m, ckpt, 0, NULL) == GD_OK &&
               gd_graph_param_count(a) == gd_graph_param_count(b) && gd_graph_param_count(a) > 0;
    for (int i = 0; same && i < gd_graph_param_count(a); i++) {
        gd_tensor *pa = gd_graph_param(a, i), *pb = gd_graph_param(b, i);
        size_t n = (size_t)gd_tensor_numel(pa) * sizeof(float);
        float *x = malloc(n), *y = malloc(n);
        same = x != NULL && y != NULL && gd_tensor_read(pa, x, n) == GD_OK && gd_tensor_read(pb, y, n) == GD_OK &&
               memcmp(x, y, n) == 0;
        if (!same) fprintf(stderr, "parameter %s differs from its initial value\n", gd_tensor_name(pa));
        free(x);
        free(y);
    }
    gd_graph_free(a);
    gd_graph_free(b);
    return same;
}

/* AdamW's step count and the largest |first moment| in a checkpoint's optimizer file. */
static void optimizer_state(const char *ckpt, double *step, double *max_m)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/optimizer.safetensors", ckpt);
    gd_st_file *f = NULL;
    *step = -1;
    *max_m = -1;
    if (gd_st_open(ctx, p, &f) != GD_OK) return;
    const void *data;
    size_t bytes;
    gd_dtype dt;
    float v;
    if (gd_st_find(f, "optim.step", &dt, NULL, NULL, &data, &bytes) && dt == GD_F32 && bytes == 4) {
        memcpy(&v, data, 4);
        *step = v;
    }
    *max_m = 0;
    for (int i = 0; i < gd_st_count(f); i++) {
        const char *name = gd_st_name(f, i);
        if (strstr(name, ".adam_m") == NULL || !gd_st_find(f, name, &dt, NULL, NULL, &data, &bytes)) continue;
        for (size_t k = 0; k < bytes / 4; k++) {
            memcpy(&v, (const char *)data + 4 * k, 4);
            if (!(fabs(v) <= *max_m)) *max_m = fabs(v); /* NaN too */
        }
    }
    gd_st_close(f);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/gradus-lossscale.XXXXXX");
    if (mkdtemp(dir) == NULL || !tu_open_ctx()) return 1;
    gd_ctx_use_backend(ctx, "cpu");
    FILE *f = fopen(path_of("corpus.txt"), "w");
    for (int i = 0; i < 40 && f != NULL; i++)
        fputs("the cat sat on the mat. the dog sat on the log. a bird flew over the house. ", f);
    if (f != NULL) fclose(f);
    static const char text[] = "the cat sat on the mat. the dog sat on the log. a bird flew over the house. ";
    gd_tokenizer *tok = NULL;
    CHECK(gd_tokenizer_train(ctx, (const uint8_t *)text, sizeof text - 1, 320, &tok) == GD_OK, "tokenizer: %s",
          gd_ctx_error(ctx));
    const char *paths[1] = {path_of("corpus.txt")};
    gd_token_file_info info;
    gd_token_data *d = NULL;
    CHECK(tok != NULL && gd_tokens_build(ctx, tok, paths, 1, path_of("data.tok"), NULL, NULL, &info) == GD_OK &&
              gd_token_data_open(ctx, path_of("data.tok"), 0.2, &d) == GD_OK,
          "data: %s", gd_ctx_error(ctx));
    gd_lm_config m = model();
    CHECK(gd_lm_config_check(ctx, &m) == GD_OK, "config: %s", gd_ctx_error(ctx));
    if (d == NULL) return tu_finish("test_lm_loss_scale");
    gd_lm_train_result res;

    /* 1. f16 with the default (dynamic) scaling follows f32: the same data and start */
    run r32, r16;
    gd_lm_train_config c = base(&m, d, GD_F32, &r32);
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && r32.n == 16 && res.loss_scale == 0 && res.skipped_steps == 0,
          "f32: %s", gd_ctx_error(ctx));
    c = base(&m, d, GD_F16, &r16);
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && r16.n == 16 && !res.saw_nan, "f16: %s", gd_ctx_error(ctx));
    /* 65536 can overflow this model's f16 gradients once or twice early on */
    CHECK(res.skipped_steps <= 2 && res.loss_scale >= 16384 && res.loss_scale <= 65536,
          "f16's scale %g after %lld skipped steps (expected 65536 with few skips)", res.loss_scale,
          (long long)res.skipped_steps);
    if (getenv("GD_TEST_VERBOSE") != NULL)
        for (int i = 0; i < 16; i++)
            printf("step %2d  f32 %.5f  f16 %.5f  scale %g%s\n", i + 1, r32.loss[i], r16.loss[i], r16.scale[i],
                   r16.skip[i] ? " skipped" : "");
    double maxd = 0, sum = 0;
    for (int i = 0; i < 16; i++) {
        double dd = fabs(r16.loss[i] - r32.loss[i]);
        maxd = dd > maxd ? dd : maxd;
        sum += dd;
    }
    CHECK(r16.loss[15] < 0.6 * r16.loss[0], "f16 did not learn: loss %g -> %g", r16.loss[0], r16.loss[15]);
    CHECK(maxd < 0.03 * r32.loss[0] && sum / 16 < 0.01 * r32.loss[0],
          "f16 strays from f32: mean |diff| %g, max %g (f32 starts at %g)", sum / 16, maxd, r32.loss[0]);

    /* 2. a power-of-two scale multiplies and divides exactly: f32 with a fixed scale of
     * 1024 gives f32's losses and gradient norms bit for bit */
    run rf;
    c = base(&m, d, GD_F32, &rf);
    c.loss_scale = (gd_loss_scale_config){.mode = GD_LOSS_SCALE_FIXED, .init = 1024};
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && rf.n == 16 && res.loss_scale == 1024, "f32 scaled: %s",
          gd_ctx_error(ctx));
    int same = 1;
    for (int i = 0; i < 16; i++) same &= rf.loss[i] == r32.loss[i] && (float)rf.norm[i] == (float)r32.norm[i];
    CHECK(same, "f32 with scale 1024 differs: step 16 loss %.9g vs %.9g, norm %.9g vs %.9g", rf.loss[15], r32.loss[15],
          rf.norm[15], r32.norm[15]);

    /* 3. an absurd scale overflows f16 at every step: each step is skipped, the scale
     * halves, and the checkpoint holds the initial weights, zero moments and step 0 */
    run ro;
    c = base(&m, d, GD_F16, &ro);
    c.loss_scale = (gd_loss_scale_config){.init = 1e30};
    c.steps = 6;
    c.stop_at = 3;
    c.out_dir = path_of("run-overflow");
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && ro.n == 3 && !res.saw_nan, "overflow: %s", gd_ctx_error(ctx));
    double want = (float)1e30;
    for (int i = 0; i < 3; i++) {
        want = (float)(want * 0.5);
        CHECK(ro.skip[i] && ro.skipped[i] == i + 1 && ro.scale[i] == want && isnan(ro.norm[i]),
              "overflowing step %d: skipped %d (%lld in all), scale %g (want %g), norm %g", i + 1, ro.skip[i],
              (long long)ro.skipped[i], ro.scale[i], want, ro.norm[i]);
    }
    CHECK(isfinite(ro.loss[0]) && res.skipped_steps == 3, "the loss %g, %lld skipped", ro.loss[0],
          (long long)res.skipped_steps);
    char ck[1100];
    CHECK(gd_lm_checkpoint_resolve(ctx, path_of("run-overflow"), ck, sizeof ck) == GD_OK, "%s", gd_ctx_error(ctx));
    CHECK(weights_initial(&m, 7, ck), "weights changed by skipped steps");
    double ostep, maxm;
    optimizer_state(ck, &ostep, &maxm);
    CHECK(ostep == 0 && maxm == 0, "after skipped steps AdamW's step is %g and its moments reach %g", ostep, maxm);
    gd_lm_state st = {0};
    {
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, 4});
        gd_lm_forward(g, &m, ids, NULL, GD_F32);
        CHECK(gd_lm_checkpoint_load(ctx, g, &m, ck, 1, &st) == GD_OK && st.step == 3 && st.loss_scale == want &&
                  st.skipped_steps == 3 && st.scale_good_steps == 0,
              "trainer state: step %lld, scale %g, %lld skipped, %lld good: %s", (long long)st.step, st.loss_scale,
              (long long)st.skipped_steps, (long long)st.scale_good_steps, gd_ctx_error(ctx));
        gd_graph_free(g);
    }

    /* 4. good steps in a row grow the scale; a fixed one stays */
    run rg;
    c = base(&m, d, GD_F16, &rg);
    c.steps = 7;
    c.loss_scale = (gd_loss_scale_config){.mode = GD_LOSS_SCALE_DYNAMIC, .init = 256, .growth_interval = 3};
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && rg.n == 7, "growth: %s", gd_ctx_error(ctx));
    static const double grown[7] = {256, 256, 512, 512, 512, 1024, 1024};
    same = res.skipped_steps == 0;
    for (int i = 0; i < 7; i++) same &= rg.scale[i] == grown[i];
    CHECK(same, "scales %g %g %g %g %g %g %g (%lld skipped)", rg.scale[0], rg.scale[1], rg.scale[2], rg.scale[3],
          rg.scale[4], rg.scale[5], rg.scale[6], (long long)res.skipped_steps);
    c.loss_scale.mode = GD_LOSS_SCALE_FIXED;
    c.loss_scale.init = 1e30;
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && res.loss_scale == (float)1e30 && res.skipped_steps == 7,
          "a fixed scale of 1e30: %g, %lld skipped: %s", res.loss_scale, (long long)res.skipped_steps, gd_ctx_error(ctx));

    /* 5. skips, recovery and growth, stopped and resumed: the same losses, scales and
     * skips, bit for bit. 2^30 overflows the tiny model's f16 gradients for a few steps. */
    gd_loss_scale_config busy = {.init = 1073741824.0, .growth_interval = 3};
    run ra, rb;
    c = base(&m, d, GD_F16, &ra);
    c.loss_scale = busy;
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && ra.n == 16 && !res.saw_nan, "busy: %s", gd_ctx_error(ctx));
    int grew = 0;
    for (int i = 1; i < 16; i++) grew |= ra.scale[i] > ra.scale[i - 1];
    CHECK(ra.skipped[6] > 0 && ra.skipped[15] < 16 && grew, "the run meant to skip, recover and grow: %lld skipped by "
          "step 7, %lld by 16, grew %d", (long long)ra.skipped[6], (long long)ra.skipped[15], grew);
    c = base(&m, d, GD_F16, &rb);
    c.loss_scale = busy;
    c.out_dir = path_of("run-resume");
    c.stop_at = 7;
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && rb.n == 7, "first part: %s", gd_ctx_error(ctx));
    c.stop_at = 0;
    c.resume_dir = path_of("run-resume");
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK && rb.n == 16, "resumed: %s", gd_ctx_error(ctx));
    same = 1;
    for (int i = 0; i < 16; i++)
        same &= ra.loss[i] == rb.loss[i] && ra.scale[i] == rb.scale[i] && ra.skipped[i] == rb.skipped[i];
    CHECK(same, "resumed run differs: step 16 loss %.9g vs %.9g, scale %g vs %g, skipped %lld vs %lld", ra.loss[15],
          rb.loss[15], ra.scale[15], rb.scale[15], (long long)ra.skipped[15], (long long)rb.skipped[15]);
    FILE *mf = fopen(path_of("run-resume/metrics.jsonl"), "r");
    int lines = 0, with_scale = 0;
    char line[512];
    while (mf != NULL && fgets(line, sizeof line, mf) != NULL) {
        lines++;
        with_scale += strstr(line, "\"loss_scale\":") != NULL && strstr(line, "\"skipped_steps\":") != NULL;
    }
    if (mf != NULL) fclose(mf);
    CHECK(lines == 16 && with_scale == 16, "metrics.jsonl: %d lines, %d with the scale", lines, with_scale);

    /* 6. a data-parallel job of one rank (the sums in grad_sum states, checked there)
     * skips and trains as one process does, accumulation included */
    gd_dist *job = NULL;
    CHECK(gd_dist_open(ctx, NULL, &job) == GD_OK, "a job of one: %s", gd_ctx_error(ctx));
    run rp, rj;
    c = base(&m, d, GD_F16, &rp);
    c.loss_scale = busy;
    c.grad_accum = 2;
    c.steps = 10;
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK, "accumulated: %s", gd_ctx_error(ctx));
    c.user = &rj;
    memset(&rj, 0, sizeof rj);
    c.dist = job;
    CHECK(gd_lm_train(ctx, &c, &res) == GD_OK, "a job of one: %s", gd_ctx_error(ctx));
    same = rp.n == 10 && rj.n == 10 && rp.skipped[9] > 0;
    for (int i = 0; i < 10; i++) same &= rp.loss[i] == rj.loss[i] && rp.scale[i] == rj.scale[i];
    CHECK(same, "a job of one differs from one process: step 10 loss %.9g vs %.9g, %lld vs %lld skipped", rp.loss[9],
          rj.loss[9], (long long)rp.skipped[9], (long long)rj.skipped[9]);
    gd_dist_close(job);

    /* 7. bad settings, refused by name */
    run bad;
    c = base(&m, d, GD_F16, &bad);
    c.loss_scale = (gd_loss_scale_config){.growth = 0.5};
    CHECK(gd_lm_train(ctx, &c, &res) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "growth 0.5"), "growth 0.5: %s",
          gd_ctx_error(ctx));
    c.loss_scale = (gd_loss_scale_config){.init = -4};
    CHECK(gd_lm_train(ctx, &c, &res) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "loss scale -4"), "scale -4: %s",
          gd_ctx_error(ctx));
    c.loss_scale = (gd_loss_scale_config){.mode = (gd_loss_scaling)9};
    CHECK(gd_lm_train(ctx, &c, &res) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "mode 9"), "mode 9: %s",
          gd_ctx_error(ctx));

    /* 8. the scaler's state in trainer.json: optional, and checked when there */
    static const char head[] = "{\"format\":\"gradus-trainer\",\"version\":1,\"step\":5,\"seed\":1,"
                               "\"data\":{\"seed\":1,\"epoch\":0,\"index\":3}";
    static const struct {
        const char *tail;
        int ok;
        double scale;
    } states[] = {
        {"}", 1, 0},
        {",\"loss_scale\":{\"scale\":2048,\"good_steps\":1,\"skipped_steps\":2}}", 1, 2048},
        {",\"loss_scale\":{\"scale\":-1,\"good_steps\":1,\"skipped_steps\":2}}", 0, 0},
        {",\"loss_scale\":{\"scale\":0,\"good_steps\":1,\"skipped_steps\":2}}", 0, 0},
        {",\"loss_scale\":{\"scale\":8,\"good_steps\":-1,\"skipped_steps\":2}}", 0, 0},
        {",\"loss_scale\":{\"scale\":8,\"good_steps\":1,\"skipped_steps\":6}}", 0, 0},
        {",\"loss_scale\":{\"scale\":\"8\",\"good_steps\":1,\"skipped_steps\":2}}", 0, 0},
        {",\"loss_scale\":8}", 0, 0},
    };
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "%s%s", head, states[i].tail);
        gd_lm_state ps = {0};
        gd_status s = gd_lm_state_parse(ctx, "trainer.json", json, strlen(json), &ps);
        if (states[i].ok)
            CHECK(s == GD_OK && ps.step == 5 && ps.loss_scale == states[i].scale, "%s: %s", json, gd_ctx_error(ctx));
        else
            CHECK(s == GD_ERR_FORMAT && strstr(gd_ctx_error(ctx), "trainer.json: has a loss_scale"), "%s accepted: %s",
                  json, gd_ctx_error(ctx));
    }

    gd_token_data_close(d);
    gd_tokenizer_free(tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (failures == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_lm_loss_scale");
}
