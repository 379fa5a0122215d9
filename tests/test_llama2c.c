/* test_llama2c.c — llama2.c checkpoints: the weights of a gradus checkpoint written out as
 * llama2.c files (the legacy header with the RoPE table, and the version 1 header; with
 * the output tied and apart; q and k rows put back into llama2.c's interleaved rotary
 * order) must give bit for bit the logits of the checkpoint itself through the engine,
 * and the same greedy tokens. Damaged files are refused naming the file and the cause.
 */
#include "gradus_lm.h"
#include "testutil.h"

#include <stdlib.h>

static char root[64];

typedef struct model {
    gd_lm_config cfg;
    gd_st_file *st;
} model;

static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }

/* The f32 data of tensor `name`, or NULL (a failed check). */
static const float *tensor(const model *m, const char *name, size_t *n)
{
    const void *data;
    size_t bytes;
    gd_dtype dt;
    int ok = gd_st_find(m->st, name, &dt, NULL, NULL, &data, &bytes) && dt == GD_F32;
    CHECK(ok, "no f32 tensor %s", name);
    *n = bytes / 4;
    return ok ? data : NULL;
}

static void put_tensor(FILE *f, const model *m, const char *name)
{
    size_t n;
    const float *v = tensor(m, name, &n);
    if (v != NULL) fwrite(v, 4, n, f);
}

/* every layer's tensor "model.layers.L.<what>" in turn; q and k rows reordered from
 * Hugging Face's rotary halves to llama2.c's pairs */
static void put_layers(FILE *f, const model *m, const char *what, int64_t heads)
{
    int64_t hd = m->cfg.dim / m->cfg.n_heads, D = m->cfg.dim, half = hd / 2;
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, what);
        size_t n;
        const float *v = tensor(m, name, &n);
        if (v == NULL) continue;
        if (heads == 0) {
            fwrite(v, 4, n, f);
            continue;
        }
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < half; i++)
                for (int c = 0; c < 2; c++) fwrite(v + (h * hd + c * half + i) * D, 4, (size_t)D, f);
    }
}

static int write_llama2c(const model *m, const char *path, int version)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) return 0;
    const gd_lm_config *c = &m->cfg;
    int shared = c->tied_embeddings;
    int32_t dims[7] = {(int32_t)c->dim, (int32_t)c->hidden_dim, (int32_t)c->n_layers, (int32_t)c->n_heads,
                       (int32_t)c->n_kv_heads, (int32_t)(version == 0 && !shared ? -c->vocab_size : c->vocab_size),
                       (int32_t)c->max_seq};
    if (version == 1) {
        put_i32(f, 0x616b3432);
        put_i32(f, 1);
    }
    for (int i = 0; i < 7; i++) put_i32(f, dims[i]);
    if (version == 1) {
        unsigned char pad[256 - 36] = {0};
        pad[0] = (unsigned char)shared;
        fwrite(pad, 1, sizeof pad, f);
        put_layers(f, m, "input_layernorm.weight", 0);
        put_layers(f, m, "post_attention_layernorm.weight", 0);
        put_tensor(f, m, "model.norm.weight");
        put_tensor(f, m, "model.embed_tokens.weight");
    } else {
        put_tensor(f, m, "model.embed_tokens.weight");
        put_layers(f, m, "input_layernorm.weight", 0);
    }
    put_layers(f, m, "self_attn.q_proj.weight", c->n_heads);
    put_layers(f, m, "self_attn.k_proj.weight", c->n_kv_heads);
    put_layers(f, m, "self_attn.v_proj.weight", 0);
    put_layers(f, m, "self_attn.o_proj.weight", 0);
    if (version == 0) put_layers(f, m, "post_attention_layernorm.weight", 0);
    put_layers(f, m, "mlp.gate_proj.weight", 0);
    put_layers(f, m, "mlp.down_proj.weight", 0);
    put_layers(f, m, "mlp.up_proj.weight", 0);
    if (version == 0) {
        put_tensor(f, m, "model.norm.weight");
        int64_t table = c->max_seq * (c->dim / c->n_heads); /* cos and sin, not read */
        for (int64_t i = 0; i < table; i++) put_i32(f, 0);
    }
    if (!shared) put_tensor(f, m, "lm_head.weight");
    return fclose(f) == 0;
}

/* Engine logits after a fixed prompt (NULL on an error, left in ctx). */
static float *logits_of(const char *where, int64_t V)
{
    gd_lm_engine *e = NULL;
    if (gd_lm_engine_open(ctx, where, NULL, &e) != GD_OK) return NULL;
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = (i * 29 + 3) % (int32_t)V;
    const float *lg = NULL;
    float *out = NULL;
    if (gd_lm_engine_prefill(e, ids, 20, &lg) == GD_OK && (out = malloc(sizeof *out * (size_t)V)) != NULL)
        memcpy(out, lg, sizeof *out * (size_t)V);
    gd_lm_engine_free(e);
    return out;
}

static int32_t *greedy(const char *where, int64_t *n)
{
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    gd_lm_generate_config gc = {.max_tokens = 12};
    int32_t *out = NULL;
    CHECK(gd_lm_generate(ctx, where, prompt, 5, &gc, &out, n) == GD_OK, "generate from %s: %s", where, gd_ctx_error(ctx));
    return out;
}

static void damaged(const char *what, const char *path, const char *word)
{
    gd_lm_config cfg;
    CHECK(gd_lm_model_config(ctx, path, &cfg) != GD_OK, "%s: accepted", what);
    CHECK(strstr(gd_ctx_error(ctx), word) != NULL && strstr(gd_ctx_error(ctx), path) != NULL,
          "%s: the message lacks \"%s\" or the file: %s", what, word, gd_ctx_error(ctx));
    printf("%s: refused: %s\n", what, gd_ctx_error(ctx));
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    snprintf(root, sizeof root, "/tmp/gradus-l2c-XXXXXX");
    if (mkdtemp(root) == NULL) return 1;
    for (int tied = 0; tied < 2; tied++) {
        model m = {.cfg = {.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                           .hidden_dim = 96, .vocab_size = 250, .max_seq = 48, .rope_theta = 1e4, .norm_eps = 1e-5,
                           .tied_embeddings = tied}};
        CHECK(gd_lm_config_check(ctx, &m.cfg) == GD_OK, "config: %s", gd_ctx_error(ctx));
        char dir[200], ckpt[600], path[700];
        snprintf(dir, sizeof dir, "%s/m%d", root, tied);
        gd_graph *g = fresh();
        gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, 4});
        gd_lm_state st = {.step = 1};
        int ok = gd_lm_forward(g, &m.cfg, ids, NULL, GD_F32) != NULL && gd_graph_init_params(g, 5 + (uint64_t)tied) == GD_OK &&
                 gd_lm_checkpoint_save(ctx, g, &m.cfg, NULL, &st, dir, ckpt, sizeof ckpt) == GD_OK;
        gd_graph_free(g);
        CHECK(ok, "saving: %s", gd_ctx_error(ctx));
        if (!ok) continue;
        snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
        if (gd_st_open(ctx, path, &m.st) != GD_OK) continue;
        float *want = logits_of(ckpt, m.cfg.vocab_size);
        int64_t nw = 0;
        int32_t *want_ids = greedy(ckpt, &nw);
        for (int version = 0; version < 2 && want != NULL; version++) {
            char bin[700];
            snprintf(bin, sizeof bin, "%s/m%d-v%d.bin", root, tied, version);
            CHECK(write_llama2c(&m, bin, version), "writing %s", bin);
            gd_lm_config got;
            CHECK(gd_lm_model_config(ctx, bin, &got) == GD_OK && got.tied_embeddings == tied && got.n_kv_heads == 2 &&
                      got.max_seq == 48 && got.vocab_size == 250,
                  "%s: config: %s", bin, gd_ctx_error(ctx));
            float *lg = logits_of(bin, m.cfg.vocab_size);
            int same = lg != NULL && memcmp(lg, want, sizeof *lg * (size_t)m.cfg.vocab_size) == 0;
            printf("%s header, output %s: logits %s the safetensors checkpoint's\n", version ? "version 1" : "legacy",
                   tied ? "tied" : "apart", same ? "identical to" : "DIFFER from");
            CHECK(same, "%s: logits differ from the checkpoint's (%s)", bin, lg == NULL ? gd_ctx_error(ctx) : "values");
            int64_t nb = 0;
            int32_t *b = greedy(bin, &nb);
            CHECK(b != NULL && want_ids != NULL && nb == nw && memcmp(b, want_ids, sizeof *b * (size_t)nb) == 0,
                  "%s: greedy tokens differ", bin);
            gd_free_mem(b);
            free(lg);
            if (tied == 0 && version == 1) { /* damaged copies of this one */
                char cmd[1600], bad[760];
                snprintf(bad, sizeof bad, "%s/short.bin", root);
                snprintf(cmd, sizeof cmd, "head -c 5000 '%s' > '%s'", bin, bad);
                if (system(cmd) == 0) damaged("a truncated file", bad, "truncated");
                snprintf(bad, sizeof bad, "%s/v2.bin", root);
                snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf '\\002' | dd of='%s' bs=1 seek=4 conv=notrunc 2>/dev/null",
                         bin, bad, bad);
                if (system(cmd) == 0) damaged("version 2 (int8)", bad, "version 2");
                snprintf(bad, sizeof bad, "%s/heads.bin", root);
                snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf '\\003' | dd of='%s' bs=1 seek=24 conv=notrunc 2>/dev/null",
                         bin, bad, bad);
                if (system(cmd) == 0) damaged("heads not a multiple of kv heads", bad, "kv heads");
            }
        }
        free(want);
        gd_free_mem(want_ids);
        gd_st_close(m.st);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return tu_finish("test_llama2c");
}
