/* test_hf_weights.c — model directories as Hugging Face writes them, loaded for
 * generation: a gradus checkpoint whose weights are bf16-exact is rewritten as
 *   - bf16 tensors (model.safetensors),
 *   - f16 tensors split over two shards with model.safetensors.index.json,
 *   - for GPT-2, names without the "transformer." prefix (GPT2Model's),
 * and each must give bit for bit the logits of the original, through the inference engine.
 * Bad directories are refused with the file and tensor named: a missing tensor, a shard
 * outside the directory, a shape that does not fit.
 */
#include "gradus_lm.h"
#include "testutil.h"
#include "gradus_semantics.h"

#include <stdlib.h>
#include <sys/stat.h>

static char root[64];

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) return 0;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static int copy_file(const char *from, const char *to)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    return system(cmd) == 0;
}

/* bits of f rounded to bf16 (nearest even) and back */
static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* f32 to the 16-bit forms: bf16 by truncation (exact here), f16 by the semantics header */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* A model of cfg whose parameters are exact in bf16 and in f16, saved. */
static int save_model(gd_lm_config *cfg, const char *dir, char *ckpt, size_t cap)
{
    gd_graph *g = fresh();
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, 4});
    int ok = gd_lm_forward(g, cfg, ids, NULL, GD_F32) != NULL && gd_graph_init_params(g, 21) == GD_OK;
    for (int i = 0; ok && i < gd_graph_param_count(g); i++) {
        gd_tensor *p = gd_graph_param(g, i);
        int64_t n = gd_tensor_numel(p);
        float *v = malloc(sizeof *v * (size_t)n);
        ok = v != NULL && gd_tensor_read(p, v, sizeof *v * (size_t)n) == GD_OK;
        /* bf16 values in f16's normal range are f16 values too: both forms are exact */
        for (int64_t k = 0; ok && k < n; k++) v[k] = fabsf(v[k]) < 0x1p-14f ? 0.0f : bf16_round(v[k]);
        ok = ok && gd_tensor_write(p, v, sizeof *v * (size_t)n) == GD_OK;
        free(v);
    }
    gd_lm_state st = {.step = 1};
    ok = ok && gd_lm_checkpoint_save(ctx, g, cfg, NULL, &st, dir, ckpt, cap) == GD_OK;
    CHECK(ok, "saving a model: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
    return ok;
}

/* Rewrites checkpoint `from`'s weights into directory `to`: as dtype (GD_BF16 or GD_F16),
 * in `shards` files (1: model.safetensors; 2: an index and two shards), names stripped of
 * `strip` when they start with it. */
static int rewrite(const char *from, const char *to, gd_dtype dtype, int shards, const char *strip)
{
    char path[600], path2[600];
    mkdir(to, 0755);
    snprintf(path, sizeof path, "%s/config.json", from);
    snprintf(path2, sizeof path2, "%s/config.json", to);
    if (!copy_file(path, path2)) return 0;
    snprintf(path, sizeof path, "%s/model.safetensors", from);
    gd_st_file *f = NULL;
    if (gd_st_open(ctx, path, &f) != GD_OK) return 0;
    int n = gd_st_count(f), ok = 1;
    gd_st_entry *e = calloc((size_t)n, sizeof *e);
    uint16_t **bufs = calloc((size_t)n, sizeof *bufs);
    char index[20000] = "{\"metadata\": {}, \"weight_map\": {";
    for (int i = 0; i < n && ok; i++) {
        const char *name = gd_st_name(f, i);
        const void *data;
        gd_dtype dt;
        size_t bytes;
        ok = gd_st_find(f, name, &dt, &e[i].ndim, e[i].shape, &data, &bytes) && dt == GD_F32;
        size_t count = bytes / 4;
        bufs[i] = malloc(2 * (count > 0 ? count : 1));
        for (size_t k = 0; ok && k < count; k++) {
            float v;
            memcpy(&v, (const char *)data + 4 * k, 4);
            bufs[i][k] = dtype == GD_BF16 ? to_bf16(v) : gdp_f32_to_f16(v);
        }
        e[i].name = strip != NULL && strncmp(name, strip, strlen(strip)) == 0 ? name + strlen(strip) : name;
        e[i].dtype = dtype;
        e[i].data = bufs[i];
        char item[300];
        snprintf(item, sizeof item, "%s\"%s\": \"part-%d.safetensors\"", i ? ", " : "", e[i].name, i % 2);
        strncat(index, item, sizeof index - strlen(index) - 1);
    }
    strncat(index, "}}", sizeof index - strlen(index) - 1);
    if (ok && shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", to);
        ok = gd_st_write(ctx, path, e, n, NULL, NULL, 0) == GD_OK;
    } else if (ok) {
        gd_st_entry *part = calloc((size_t)n, sizeof *part);
        for (int s = 0; s < 2 && ok; s++) {
            int m = 0;
            for (int i = s; i < n; i += 2) part[m++] = e[i];
            snprintf(path, sizeof path, "%s/part-%d.safetensors", to, s);
            ok = gd_st_write(ctx, path, part, m, NULL, NULL, 0) == GD_OK;
        }
        free(part);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", to);
        ok = ok && write_text(path, index);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
    gd_st_close(f);
    CHECK(ok, "rewriting %s into %s: %s", from, to, gd_ctx_error(ctx));
    return ok;
}

static const gd_lm_engine_config as_f32 = {.use_dtype = 1, .dtype = GD_F32};

/* The engine's logits after a fixed prompt, or NULL (and the error in ctx); ec NULL: the
 * engine's defaults (the stored dtype). */
static float *logits_of(const char *dir, int64_t *V, const gd_lm_engine_config *ec)
{
    gd_lm_engine *e = NULL;
    if (gd_lm_engine_open(ctx, dir, ec, &e) != GD_OK) return NULL;
    *V = gd_lm_engine_model(e)->vocab_size;
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (i * 37 + 5) % (int32_t)*V;
    const float *lg = NULL;
    float *out = NULL;
    if (gd_lm_engine_prefill(e, ids, 12, &lg) == GD_OK && (out = malloc(sizeof *out * (size_t)*V)) != NULL)
        memcpy(out, lg, sizeof *out * (size_t)*V);
    gd_lm_engine_free(e);
    return out;
}

static void same_logits(const char *what, const char *dir, const float *want, int64_t V)
{
    int64_t v2 = 0;
    float *got = logits_of(dir, &v2, &as_f32); /* widened to f32, the weights are the f32 checkpoint's */
    CHECK(got != NULL, "%s: %s", what, gd_ctx_error(ctx));
    if (got != NULL) {
        int same = v2 == V && memcmp(got, want, sizeof *got * (size_t)V) == 0;
        printf("%s: logits %s the f32 checkpoint's\n", what, same ? "identical to" : "DIFFER from");
        CHECK(same, "%s: logits differ from the f32 checkpoint's", what);
    }
    free(got);
    /* by default the engine computes in the stored dtype: close to f32, not equal */
    gd_dtype dt = GD_F32;
    CHECK(gd_lm_model_dtype(ctx, dir, &dt) == GD_OK && dt != GD_F32, "%s: stored dtype %s: %s", what, gd_dtype_name(dt),
          gd_ctx_error(ctx));
    got = logits_of(dir, &v2, NULL);
    CHECK(got != NULL, "%s, computed in %s: %s", what, gd_dtype_name(dt), gd_ctx_error(ctx));
    if (got != NULL && v2 == V) {
        double err = 0, ref = 0;
        for (int64_t i = 0; i < V; i++) err += (got[i] - want[i]) * (double)(got[i] - want[i]), ref += want[i] * (double)want[i];
        printf("%s, computed in %s: logits NMSE %.2e against f32\n", what, gd_dtype_name(dt), err / ref);
        CHECK(err > 0 && err < 1e-3 * ref, "%s, computed in %s: NMSE %.2e", what, gd_dtype_name(dt), err / ref);
    }
    free(got);
}

static void refused(const char *what, const char *dir, const char *const *words)
{
    int64_t V;
    float *got = logits_of(dir, &V, NULL);
    CHECK(got == NULL, "%s: loaded", what);
    free(got);
    for (const char *const *w = words; *w != NULL; w++)
        CHECK(strstr(gd_ctx_error(ctx), *w) != NULL, "%s: the message lacks \"%s\": %s", what, *w, gd_ctx_error(ctx));
    printf("%s: refused: %s\n", what, gd_ctx_error(ctx));
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    snprintf(root, sizeof root, "/tmp/gradus-hfw-XXXXXX");
    if (mkdtemp(root) == NULL) return 1;
    gd_lm_config cfg[2] = {
        {.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .hidden_dim = 96,
         .vocab_size = 200, .max_seq = 64, .rope_theta = 1e4, .norm_eps = 1e-5, .attn_bias = 1},
        {.arch = GD_LM_GPT2, .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4, .hidden_dim = 128,
         .vocab_size = 200, .max_seq = 64, .norm_eps = 1e-5, .tied_embeddings = 1},
    };
    const char *arch[2] = {"llama", "gpt2"};
    for (int m = 0; m < 2; m++) {
        char dir[300], ckpt[600], to[700];
        snprintf(dir, sizeof dir, "%s/%s", root, arch[m]);
        if (gd_lm_config_check(ctx, &cfg[m]) != GD_OK || !save_model(&cfg[m], dir, ckpt, sizeof ckpt)) continue;
        int64_t V = 0;
        float *want = logits_of(ckpt, &V, NULL);
        CHECK(want != NULL, "%s: the f32 checkpoint: %s", arch[m], gd_ctx_error(ctx));
        if (want == NULL) continue;
        snprintf(to, sizeof to, "%s/%s-bf16", root, arch[m]);
        if (rewrite(ckpt, to, GD_BF16, 1, NULL)) same_logits(m ? "gpt2, bf16" : "llama (q/k/v biases), bf16", to, want, V);
        snprintf(to, sizeof to, "%s/%s-f16-shards", root, arch[m]);
        if (rewrite(ckpt, to, GD_F16, 2, NULL)) same_logits(m ? "gpt2, f16 in 2 shards" : "llama, f16 in 2 shards", to, want, V);
        if (m == 1) {
            snprintf(to, sizeof to, "%s/gpt2-noprefix", root);
            if (rewrite(ckpt, to, GD_BF16, 2, "transformer.")) same_logits("gpt2, no transformer. prefix", to, want, V);
        }
        free(want);
    }
    /* bad directories */
    char bad[300], path[400], src[400];
    snprintf(bad, sizeof bad, "%s/missing", root); /* the llama config beside GPT-2's weights */
    mkdir(bad, 0755);
    snprintf(src, sizeof src, "%s/llama-bf16/config.json", root);
    snprintf(path, sizeof path, "%s/config.json", bad);
    copy_file(src, path);
    snprintf(src, sizeof src, "%s/gpt2-bf16/model.safetensors", root);
    snprintf(path, sizeof path, "%s/model.safetensors", bad);
    copy_file(src, path);
    refused("llama config, GPT-2 weights", bad, (const char *[]){"model.safetensors", "no tensor", "model.", NULL});
    snprintf(bad, sizeof bad, "%s/escape", root);
    {
        mkdir(bad, 0755);
        snprintf(src, sizeof src, "%s/llama-bf16/config.json", root);
        snprintf(path, sizeof path, "%s/config.json", bad);
        copy_file(src, path);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", bad);
        write_text(path, "{\"weight_map\": {\"model.norm.weight\": \"../llama-bf16/model.safetensors\"}}");
        refused("a shard outside the directory", bad, (const char *[]){"index.json", "model.norm.weight", "beside", NULL});
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return tu_finish("test_hf_weights");
}
