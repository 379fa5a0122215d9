/* Training a language model end to end on the CPU: a tokenizer trained on a small text,
 * a token file, a tiny llama that overfits it (the loss falls far below the unigram
 * entropy), metrics and checkpoints written; a run stopped half-way and resumed gives the
 * losses of an uninterrupted run bit for bit, with gradient accumulation too; a process
 * killed while it writes checkpoints leaves one that loads; bad inputs are refused by
 * name; generation from the checkpoint continues the text. */
#include "gradus_dist.h"
#include "gradus_lm.h"
#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static const char *path_of(const char *name) { return tu_path(dir, name); }

static void write_text(const char *name, const char *text, int repeat)
{
    FILE *f = fopen(path_of(name), "w");
    for (int i = 0; i < repeat && f != NULL; i++) fputs(text, f);
    if (f != NULL) fclose(f);
}

static gd_lm_config tiny(void)
{
    gd_lm_config c = {.arch = GD_LM_LLAMA, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .hidden_dim = 64,
                      .vocab_size = 320, .max_seq = 32, .rope_theta = 10000, .norm_eps = 1e-5, .tied_embeddings = 1};
    return c;
}

typedef struct losses {
    int n;
    double v[64];
    double val;
} losses;

static void on_progress(void *user, const gd_lm_progress *p)
{
    losses *l = user;
    if (p->step >= 1 && p->step <= 64) l->v[p->step - 1] = p->loss;
    if (p->step > l->n) l->n = (int)p->step;
    if (!isnan(p->val_loss)) l->val = p->val_loss;
}

static gd_lm_train_config base(gd_lm_config *m, gd_token_data *d, const gd_tokenizer *t, losses *l)
{
    gd_lm_train_config c = {.model = *m, .data = d, .tokenizer = t, .steps = 40, .batch = 4, .seq = 16, .lr = 1e-2,
                            .warmup = 2, .clip = 1.0, .weight_decay = 0.01, .seed = 7, .report_every_s = 1e-9,
                            .progress = on_progress, .user = l};
    return c;
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/gradus-lmtrain.XXXXXX");
    if (mkdtemp(dir) == NULL || gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options)}) != GD_OK) return 1;
    gd_ctx_use_backend(ctx, "cpu");
    mkdir(path_of("corpus"), 0755);
    write_text("corpus/a.txt", "the cat sat on the mat. the dog sat on the log. ", 40);
    write_text("corpus/b.txt", "a bird flew over the house and the cat watched it. ", 40);
    write_text("corpus/c.txt", "in the beginning the cat and the dog were friends. ", 40);

    /* tokenizer and data */
    FILE *f = fopen(path_of("corpus/a.txt"), "rb");
    char text[4096];
    size_t n = f != NULL ? fread(text, 1, sizeof text, f) : 0;
    if (f != NULL) fclose(f);
    gd_tokenizer *tok = NULL;
    CHECK(gd_tokenizer_train(ctx, (const uint8_t *)text, n, 320, &tok) == GD_OK, "tokenizer: %s", gd_ctx_error(ctx));
    const char *paths[1] = {path_of("corpus")};
    gd_token_file_info info;
    CHECK(gd_tokens_build(ctx, tok, paths, 1, path_of("data.tok"), NULL, NULL, &info) == GD_OK, "tokens: %s",
          gd_ctx_error(ctx));
    gd_token_data *d = NULL;
    CHECK(gd_token_data_open(ctx, path_of("data.tok"), 0.34, &d) == GD_OK, "open: %s", gd_ctx_error(ctx));
    if (tok == NULL || d == NULL) return tu_finish("test_lm_train");
    gd_lm_config m = tiny();
    CHECK(gd_lm_config_check(ctx, &m) == GD_OK, "config: %s", gd_ctx_error(ctx));

    /* 1. an uninterrupted run, with checkpoints and metrics */
    losses a = {0};
    gd_lm_train_config c = base(&m, d, tok, &a);
    c.out_dir = path_of("run-a");
    c.ckpt_every = 6;
    gd_lm_train_result ra;
    CHECK(gd_lm_train(ctx, &c, &ra) == GD_OK, "train: %s", gd_ctx_error(ctx));
    CHECK(ra.steps == 40 && a.n == 40 && !ra.saw_nan, "ran %lld steps", (long long)ra.steps);
    CHECK(a.v[39] < 0.5 * a.v[0] && ra.val_loss < 0.7 * a.v[0], "loss %g -> %g, validation %g", a.v[0], a.v[39],
          ra.val_loss);
    char ck[1100];
    CHECK(gd_lm_checkpoint_resolve(ctx, path_of("run-a"), ck, sizeof ck) == GD_OK && strstr(ck, "ckpt-00000040"),
          "latest: %s", gd_ctx_error(ctx));
    FILE *mf = fopen(path_of("run-a/metrics.jsonl"), "r");
    int lines = 0;
    char line[512];
    while (mf != NULL && fgets(line, sizeof line, mf) != NULL) lines += strncmp(line, "{\"step\":", 8) == 0;
    if (mf != NULL) fclose(mf);
    CHECK(lines == 40, "metrics.jsonl has %d step lines", lines);

    /* 2. stopped at step 10 (checkpoints at 6 and 10), resumed: the same losses, bit for bit */
    losses b = {0};
    c = base(&m, d, tok, &b);
    c.out_dir = path_of("run-b");
    c.ckpt_every = 6;
    c.stop_at = 10;
    gd_lm_train_result rb;
    CHECK(gd_lm_train(ctx, &c, &rb) == GD_OK && rb.steps == 10, "first half: %s", gd_ctx_error(ctx));
    c.stop_at = 0;
    c.resume_dir = path_of("run-b/ckpt-00000010");
    gd_lm_checkpoint_resolve(ctx, path_of("run-b"), ck, sizeof ck);
    CHECK(strstr(ck, "ckpt-00000010") != NULL, "the stopped run's checkpoint: %s", ck);
    CHECK(gd_lm_train(ctx, &c, &rb) == GD_OK && rb.steps == 40, "resumed: %s", gd_ctx_error(ctx));
    int same = 1;
    for (int i = 0; i < 40; i++) same &= a.v[i] == b.v[i];
    CHECK(same, "resumed losses differ: step 11 %.9g vs %.9g, step 40 %.9g vs %.9g", a.v[10], b.v[10], a.v[39], b.v[39]);

    /* 3. gradient accumulation resumes exactly too */
    losses g1 = {0}, g2 = {0};
    c = base(&m, d, tok, &g1);
    c.grad_accum = 2;
    c.steps = 8;
    c.out_dir = path_of("run-acc1");
    gd_lm_train_result rg;
    CHECK(gd_lm_train(ctx, &c, &rg) == GD_OK, "accum: %s", gd_ctx_error(ctx));
    c.user = &g2;
    c.out_dir = path_of("run-acc2");
    c.ckpt_every = 4;
    c.stop_at = 4;
    CHECK(gd_lm_train(ctx, &c, &rg) == GD_OK, "accum first half: %s", gd_ctx_error(ctx));
    c.stop_at = 0;
    c.resume_dir = path_of("run-acc2");
    CHECK(gd_lm_train(ctx, &c, &rg) == GD_OK, "accum resumed: %s", gd_ctx_error(ctx));
    same = g1.n == 8 && g2.n == 8;
    for (int i = 0; i < 8; i++) same &= g1.v[i] == g2.v[i];
    CHECK(same, "accumulated losses differ after resuming");

    /* 3b. a data-parallel job of one rank (gradients summed through gd_dist, the update a
     * program of its own) trains as one process does, bit for bit, accumulation included */
    gd_dist *job = NULL;
    CHECK(gd_dist_open(ctx, NULL, &job) == GD_OK && gd_dist_size(job) == 1, "a job of one: %s", gd_ctx_error(ctx));
    losses g3 = {0};
    c = base(&m, d, tok, &g3);
    c.grad_accum = 2;
    c.steps = 8;
    c.dist = job;
    c.out_dir = path_of("run-job");
    CHECK(gd_lm_train(ctx, &c, &rg) == GD_OK && rg.ranks == 1 && strcmp(rg.summed_on, "host") == 0 &&
              rg.optimizer_bytes == 2 * rg.param_bytes,
          "a job of one: %s (%d ranks, summed on %s)", gd_ctx_error(ctx), rg.ranks, rg.summed_on);
    same = g3.n == 8;
    for (int i = 0; i < 8; i++) same &= g1.v[i] == g3.v[i];
    CHECK(same, "a job of one: losses differ from one process's: step 8 %.9g vs %.9g", g1.v[7], g3.v[7]);
    gd_dist_close(job);

    /* 4. killed while writing checkpoints: the one `latest` names always loads */
    for (int k = 0; k < 8; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            gd_ctx *c2 = NULL;
            if (gd_ctx_create(&c2, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) _exit(3);
            gd_token_data *d2 = NULL;
            if (gd_token_data_open(c2, path_of("data.tok"), 0.34, &d2) != GD_OK) _exit(3);
            losses l = {0};
            gd_lm_train_config cc = base(&m, d2, tok, &l);
            cc.steps = 1000;
            cc.ckpt_every = 1;
            cc.out_dir = path_of("run-kill");
            gd_lm_train_result r;
            gd_lm_train(c2, &cc, &r);
            _exit(0);
        }
        /* once a first checkpoint exists, kill at a different moment each time: the
         * writes of later checkpoints are under way most of the time */
        struct timespec tick = {0, 2000000L};
        for (int w = 0; w < 5000 && access(path_of("run-kill/latest"), F_OK) != 0; w++) nanosleep(&tick, NULL);
        struct timespec ts = {0, (long)(3 + 11 * k) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, 8});
        gd_lm_forward(g, &m, ids, NULL, GD_F32);
        gd_lm_state st;
        gd_status s = gd_lm_checkpoint_load(ctx, g, &m, path_of("run-kill"), 1, &st);
        CHECK(s == GD_OK, "after kill %d: %s", k, gd_ctx_error(ctx));
        gd_graph_free(g);
    }

    /* 5. bad inputs */
    losses bad = {0};
    c = base(&m, d, tok, &bad);
    c.seq = 64;
    CHECK(gd_lm_train(ctx, &c, &rg) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "longer than the model"),
          "a sequence longer than the model's: %s", gd_ctx_error(ctx));
    gd_lm_config other = tiny();
    other.dim = 48;
    gd_lm_config_check(ctx, &other);
    c = base(&other, d, tok, &bad);
    c.resume_dir = path_of("run-a");
    CHECK(gd_lm_train(ctx, &c, &rg) != GD_OK && strstr(gd_ctx_error(ctx), "another model"),
          "resuming another model: %s", gd_ctx_error(ctx));
    gd_lm_config small_vocab = tiny();
    small_vocab.vocab_size = 100;
    gd_lm_config_check(ctx, &small_vocab);
    c = base(&small_vocab, d, tok, &bad);
    CHECK(gd_lm_train(ctx, &c, &rg) == GD_ERR_INVALID && strstr(gd_ctx_error(ctx), "encoded with"),
          "data of a larger vocabulary: %s", gd_ctx_error(ctx));

    /* 6. generation from the checkpoint continues the text it learnt */
    int32_t *prompt = NULL, *out = NULL;
    size_t np = 0;
    int64_t no = 0;
    gd_tokenizer_encode(ctx, tok, (const uint8_t *)"the cat sat on", 14, &prompt, &np);
    gd_lm_generate_config gc = {.max_tokens = 6};
    CHECK(gd_lm_generate(ctx, path_of("run-a"), prompt, (int64_t)np, &gc, &out, &no) == GD_OK, "generate: %s",
          gd_ctx_error(ctx));
    uint8_t *gen = NULL;
    size_t gl = 0;
    if (out != NULL) gd_tokenizer_decode(ctx, tok, out, (size_t)no, &gen, &gl);
    CHECK(gen != NULL && strncmp((const char *)gen, "the cat sat on the", 18) == 0, "greedy continuation: \"%s\"",
          gen != NULL ? (const char *)gen : "");
    gd_free_mem(gen);
    gd_free_mem(out);
    gd_free_mem(prompt);

    gd_token_data_close(d);
    gd_tokenizer_free(tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (failures == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_lm_train");
}
