/* Model configs: the presets (and their parameter counts against the published ones), the
 * check's derived fields and its refusals, Hugging Face config.json files of each family
 * (full files as published, and nearly empty ones that take the transformers defaults),
 * keys that are refused because they change the model, and write -> read round trips. */
#include "gradus_lm.h"
#include "testutil.h"

#include <stdlib.h>
#include <unistd.h>

static char dir[256];

static const char *tmp_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static const char *write_text(const char *name, const char *text)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot create %s", path);
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static int same_config(const gd_lm_config *a, const gd_lm_config *b)
{
    return a->arch == b->arch && a->dim == b->dim && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->hidden_dim == b->hidden_dim &&
           a->vocab_size == b->vocab_size && a->vocab_padded == b->vocab_padded && a->max_seq == b->max_seq &&
           a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps && a->qk_norm == b->qk_norm &&
           a->tied_embeddings == b->tied_embeddings && a->attn_bias == b->attn_bias &&
           a->rope_factor == b->rope_factor && a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor && a->rope_original_max == b->rope_original_max;
}

static void print_config(const char *what, const gd_lm_config *c)
{
    fprintf(stderr,
            "  %s: arch %d dim %lld layers %lld heads %lld/%lld head_dim %lld hidden %lld vocab %lld/%lld seq %lld "
            "theta %g eps %g qk_norm %d tied %d bias %d\n",
            what, c->arch, (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
            (long long)c->head_dim, (long long)c->hidden_dim, (long long)c->vocab_size, (long long)c->vocab_padded,
            (long long)c->max_seq, c->rope_theta, c->norm_eps, c->qk_norm, c->tied_embeddings, c->attn_bias);
}

static void expect_config(const char *what, const gd_lm_config *got, const gd_lm_config *want)
{
    CHECK(same_config(got, want), "%s: config differs", what);
    if (!same_config(got, want)) {
        print_config("got ", got);
        print_config("want", want);
    }
}

/* ---- presets ------------------------------------------------------------------------------ */

static void presets(void)
{
    gd_lm_config c;
    CHECK(gd_lm_preset(ctx, "qwen3-0.6b-shape", &c) == GD_OK, "qwen3: %s", gd_ctx_error(ctx));
    expect_config("qwen3-0.6b-shape", &c,
                  &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 1024, .n_layers = 28, .n_heads = 16, .n_kv_heads = 8,
                                  .head_dim = 128, .hidden_dim = 3072, .vocab_size = 151936, .vocab_padded = 151936,
                                  .max_seq = 1024, .rope_theta = 1e6, .norm_eps = 1e-6, .qk_norm = 1,
                                  .tied_embeddings = 1});
    /* Qwen3-0.6B: 596,049,920 parameters (0.44 B without the embedding, as its card says) */
    CHECK(gd_lm_param_count(&c) == 596049920, "qwen3-0.6b params %lld", (long long)gd_lm_param_count(&c));

    CHECK(gd_lm_preset(ctx, "gpt2-124m", &c) == GD_OK, "gpt2: %s", gd_ctx_error(ctx));
    expect_config("gpt2-124m", &c,
                  &(gd_lm_config){.arch = GD_LM_GPT2, .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                                  .head_dim = 64, .hidden_dim = 3072, .vocab_size = 50257, .vocab_padded = 50304,
                                  .max_seq = 1024, .norm_eps = 1e-5, .tied_embeddings = 1});
    /* GPT-2 small has 124,439,808 parameters with 50257 rows; padding adds 47 * 768 */
    CHECK(gd_lm_param_count(&c) == 124439808 + 47 * 768, "gpt2 params %lld", (long long)gd_lm_param_count(&c));
    gd_lm_config unpadded = c;
    unpadded.vocab_padded = 50257;
    CHECK(gd_lm_param_count(&unpadded) == 124439808, "gpt2 unpadded params %lld",
          (long long)gd_lm_param_count(&unpadded));

    CHECK(gd_lm_preset(ctx, "stories15m", &c) == GD_OK, "stories15m: %s", gd_ctx_error(ctx));
    expect_config("stories15m", &c,
                  &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 288, .n_layers = 6, .n_heads = 6, .n_kv_heads = 6,
                                  .head_dim = 48, .hidden_dim = 768, .vocab_size = 32000, .vocab_padded = 32000,
                                  .max_seq = 256, .rope_theta = 1e4, .norm_eps = 1e-5, .tied_embeddings = 1});
    /* 32000*288 + 6*(2*288 + 4*288*288 + 3*288*768) + 288 */
    CHECK(gd_lm_param_count(&c) == 15191712, "stories15m params %lld", (long long)gd_lm_param_count(&c));
    CHECK(gd_lm_preset(ctx, "stories42m", &c) == GD_OK && c.dim == 512 && c.n_layers == 8 && c.hidden_dim == 1376 &&
              c.max_seq == 1024 && c.head_dim == 64,
          "stories42m");
    CHECK(gd_lm_preset(ctx, "stories110m", &c) == GD_OK && c.dim == 768 && c.n_layers == 12 && c.hidden_dim == 2048 &&
              c.n_kv_heads == 12 && c.vocab_size == 32000,
          "stories110m");
    CHECK(gd_lm_preset(ctx, "tiny", &c) == GD_OK, "tiny: %s", gd_ctx_error(ctx));
    CHECK(c.arch == GD_LM_LLAMA && c.dim == 128 && c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 32 &&
              c.hidden_dim == 384 && c.max_seq == 256 && c.vocab_size == 2048 && !c.tied_embeddings,
          "tiny fields");
    int64_t tiny = gd_lm_param_count(&c);
    CHECK(tiny > 1000000 && tiny < 2000000, "tiny has %lld parameters", (long long)tiny);

    gd_ctx_clear_error(ctx);
    CHECK(gd_lm_preset(ctx, "gpt5", &c) == GD_ERR_INVALID, "unknown preset");
    check_error("unknown preset", (const char *[]){"gpt5", "tiny", "stories15m", "stories42m", "stories110m",
                                                   "qwen3-0.6b-shape", "gpt2-124m", NULL});
    CHECK(gd_lm_preset(ctx, NULL, &c) == GD_ERR_INVALID && gd_lm_preset(ctx, "tiny", NULL) == GD_ERR_INVALID,
          "NULL arguments");
}

/* ---- the check ---------------------------------------------------------------------------- */

static gd_lm_config base(void)
{
    return (gd_lm_config){.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 2, .n_heads = 4, .vocab_size = 100,
                          .max_seq = 32, .rope_theta = 1e4, .norm_eps = 1e-5};
}

static void refused(gd_lm_config c, const char *what, const char *n1, const char *n2)
{
    gd_ctx_clear_error(ctx);
    gd_status st = gd_lm_config_check(ctx, &c);
    CHECK(st == GD_ERR_INVALID, "%s: status %s", what, gd_status_name(st));
    check_error(what, (const char *[]){n1, n2, NULL});
}

static void check(void)
{
    gd_lm_config c = base();
    CHECK(gd_lm_config_check(ctx, &c) == GD_OK, "base: %s", gd_ctx_error(ctx));
    CHECK(c.n_kv_heads == 4 && c.head_dim == 16 && c.vocab_padded == 100, "derived kv heads, head_dim, vocab_padded");
    CHECK(c.hidden_dim == 256, "llama hidden_dim 4*64*2/3 = 170 rounded up to 256: %lld", (long long)c.hidden_dim);
    c = base();
    c.dim = 288;
    c.n_heads = 6;
    CHECK(gd_lm_config_check(ctx, &c) == GD_OK && c.hidden_dim == 768, "llama2.c's 768 for dim 288");
    c = base();
    c.arch = GD_LM_GPT2;
    CHECK(gd_lm_config_check(ctx, &c) == GD_OK && c.hidden_dim == 256, "GPT-2 hidden 4 * dim");

    /* shapes that fit nothing in particular still work */
    c = base();
    c.dim = 42;
    c.n_heads = 7;
    c.n_kv_heads = 7;
    c.vocab_size = 50257;
    c.vocab_padded = 50263;
    CHECK(gd_lm_config_check(ctx, &c) == GD_OK && c.head_dim == 6, "7 heads of 6: %s", gd_ctx_error(ctx));
    c = base();
    c.dim = 100;
    c.n_heads = 5;
    c.n_kv_heads = 1;
    c.head_dim = 14;
    c.hidden_dim = 77;
    CHECK(gd_lm_config_check(ctx, &c) == GD_OK, "head_dim 14 across dim 100: %s", gd_ctx_error(ctx));
    CHECK(gd_lm_param_count(&c) > 0, "count of an odd config");

    c = base(), c.dim = 0;
    refused(c, "dim 0", "dim = 0", "positive");
    c = base(), c.n_layers = -3;
    refused(c, "negative layers", "n_layers = -3", "positive");
    c = base(), c.vocab_size = 0;
    refused(c, "vocab 0", "vocab_size = 0", NULL);
    c = base(), c.max_seq = 0;
    refused(c, "max_seq 0", "max_seq", NULL);
    c = base(), c.head_dim = -2;
    refused(c, "negative head_dim", "head_dim = -2", NULL);
    c = base(), c.dim = 100, c.n_heads = 3;
    refused(c, "dim not divisible", "dim = 100 is not divisible by n_heads = 3", "head_dim");
    c = base(), c.n_heads = 8, c.n_kv_heads = 3;
    refused(c, "kv heads", "n_kv_heads = 3 does not divide n_heads = 8", NULL);
    c = base(), c.n_heads = 4, c.n_kv_heads = 8;
    refused(c, "more kv heads than heads", "n_kv_heads = 8", NULL);
    c = base(), c.vocab_padded = 99;
    refused(c, "vocab_padded", "vocab_padded = 99 is less than vocab_size = 100", NULL);
    c = base(), c.head_dim = 15;
    refused(c, "odd head_dim", "head_dim = 15", "even");
    c = base(), c.norm_eps = 0;
    refused(c, "eps", "norm_eps", NULL);
    c = base(), c.rope_theta = NAN;
    refused(c, "theta", "rope_theta", NULL);
    c = base(), c.arch = (gd_lm_arch)7;
    refused(c, "arch", "arch = 7", NULL);
    c = base(), c.dim = (int64_t)1 << 41;
    refused(c, "huge dim", "dim", "absurdly large");
    c = base(), c.dim = (int64_t)1 << 40, c.n_heads = 1 << 20, c.vocab_size = (int64_t)1 << 40;
    refused(c, "overflowing parameters", "parameter count overflows", NULL);
    c = base(), c.dim = (int64_t)1 << 30, c.n_layers = (int64_t)1 << 40;
    refused(c, "too many layers", "parameter count overflows", NULL);
    c = base(), c.arch = GD_LM_GPT2, c.n_kv_heads = 2;
    refused(c, "GPT-2 GQA", "n_kv_heads = 2", "GPT-2");
    c = base(), c.arch = GD_LM_GPT2, c.head_dim = 8;
    refused(c, "GPT-2 head_dim", "head_dim = 8", "dim = 64");
    c = base(), c.arch = GD_LM_GPT2, c.qk_norm = 1;
    refused(c, "GPT-2 qk_norm", "qk_norm", NULL);
    c = base(), c.arch = GD_LM_GPT2, c.attn_bias = 1;
    refused(c, "GPT-2 attn_bias", "attn_bias", NULL);

    c = base(), c.dim = 0;
    CHECK(gd_lm_param_count(&c) == -1 && gd_lm_param_count(NULL) == -1, "count of bad configs");
    CHECK(gd_lm_config_check(ctx, NULL) == GD_ERR_INVALID && gd_lm_config_check(NULL, NULL) == GD_ERR_INVALID, "NULL");
}

/* ---- config.json -------------------------------------------------------------------------- */

static void read_ok(const char *file, const char *json, const gd_lm_config *want)
{
    const char *path = write_text(file, json);
    gd_lm_config c;
    gd_ctx_clear_error(ctx);
    gd_status st = gd_lm_config_read(ctx, path, &c);
    CHECK(st == GD_OK, "%s: %s", file, gd_ctx_error(ctx));
    if (st == GD_OK) expect_config(file, &c, want);
}

static void read_refused(const char *file, const char *json, gd_status want, const char *n1, const char *n2)
{
    const char *path = write_text(file, json);
    gd_lm_config c;
    gd_ctx_clear_error(ctx);
    gd_status st = gd_lm_config_read(ctx, path, &c);
    CHECK(st == want, "%s: status %s, want %s (%s)", file, gd_status_name(st), gd_status_name(want), gd_ctx_error(ctx));
    check_error(file, (const char *[]){path, n1, n2, NULL});
}

static void read_files(void)
{
    /* TinyLlama-1.1B's config.json */
    read_ok("tinyllama.json",
            "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"bos_token_id\": 1,\n"
            " \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,\n"
            " \"intermediate_size\": 5632, \"max_position_embeddings\": 2048, \"model_type\": \"llama\",\n"
            " \"num_attention_heads\": 32, \"num_hidden_layers\": 22, \"num_key_value_heads\": 4,\n"
            " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 10000.0,\n"
            " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.35.0\",\n"
            " \"use_cache\": true, \"vocab_size\": 32000}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 2048, .n_layers = 22, .n_heads = 32, .n_kv_heads = 4,
                            .head_dim = 64, .hidden_dim = 5632, .vocab_size = 32000, .vocab_padded = 32000,
                            .max_seq = 2048, .rope_theta = 1e4, .norm_eps = 1e-5});
    /* LlamaConfig's defaults */
    read_ok("llama-min.json", "{\"architectures\": [\"LlamaForCausalLM\"]}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32,
                            .head_dim = 128, .hidden_dim = 11008, .vocab_size = 32000, .vocab_padded = 32000,
                            .max_seq = 2048, .rope_theta = 1e4, .norm_eps = 1e-6});
    /* Qwen2.5-0.5B's config.json: q/k/v biases (always, in Qwen2) */
    read_ok("qwen2.5.json",
            "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,\n"
            " \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,\n"
            " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 24,\n"
            " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,\n"
            " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,\n"
            " \"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\",\n"
            " \"transformers_version\": \"4.40.1\", \"use_cache\": true, \"use_sliding_window\": false,\n"
            " \"vocab_size\": 151936}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 896, .n_layers = 24, .n_heads = 14, .n_kv_heads = 2,
                            .head_dim = 64, .hidden_dim = 4864, .vocab_size = 151936, .vocab_padded = 151936,
                            .max_seq = 32768, .rope_theta = 1e6, .norm_eps = 1e-6, .tied_embeddings = 1,
                            .attn_bias = 1});
    /* Qwen2Config's defaults, from model_type alone */
    read_ok("qwen2-min.json", "{\"model_type\": \"qwen2\"}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32,
                            .head_dim = 128, .hidden_dim = 22016, .vocab_size = 151936, .vocab_padded = 151936,
                            .max_seq = 32768, .rope_theta = 1e4, .norm_eps = 1e-6, .attn_bias = 1});
    /* Qwen3-0.6B's config.json */
    read_ok("qwen3-0.6b.json",
            "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,\n"
            " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\",\n"
            " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,\n"
            " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\",\n"
            " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8,\n"
            " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null,\n"
            " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\",\n"
            " \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 1024, .n_layers = 28, .n_heads = 16, .n_kv_heads = 8,
                            .head_dim = 128, .hidden_dim = 3072, .vocab_size = 151936, .vocab_padded = 151936,
                            .max_seq = 40960, .rope_theta = 1e6, .norm_eps = 1e-6, .qk_norm = 1,
                            .tied_embeddings = 1});
    /* Qwen3Config's head_dim defaults to 128, not hidden_size / heads */
    read_ok("qwen3-min.json",
            "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 1024, \"num_attention_heads\": 16,"
            " \"num_hidden_layers\": 2}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 1024, .n_layers = 2, .n_heads = 16, .n_kv_heads = 16,
                            .head_dim = 128, .hidden_dim = 22016, .vocab_size = 151936, .vocab_padded = 151936,
                            .max_seq = 32768, .rope_theta = 1e4, .norm_eps = 1e-6, .qk_norm = 1});
    /* openai-community/gpt2's config.json (n_inner null, ties by default) */
    read_ok("gpt2.json",
            "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], \"attn_pdrop\": 0.1,\n"
            " \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, \"initializer_range\": 0.02,\n"
            " \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", \"n_ctx\": 1024, \"n_embd\": 768,\n"
            " \"n_head\": 12, \"n_inner\": null, \"n_layer\": 12, \"n_positions\": 1024, \"resid_pdrop\": 0.1,\n"
            " \"summary_activation\": null, \"summary_first_dropout\": 0.1, \"summary_proj_to_labels\": true,\n"
            " \"summary_type\": \"cls_index\", \"summary_use_proj\": true,\n"
            " \"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}},\n"
            " \"vocab_size\": 50257}",
            &(gd_lm_config){.arch = GD_LM_GPT2, .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                            .head_dim = 64, .hidden_dim = 3072, .vocab_size = 50257, .vocab_padded = 50257,
                            .max_seq = 1024, .norm_eps = 1e-5, .tied_embeddings = 1});
    /* GPT2Config's defaults; the attribute_map names override the GPT-2 ones */
    read_ok("gpt2-alias.json",
            "{\"model_type\": \"gpt2\", \"n_embd\": 512, \"hidden_size\": 256, \"num_hidden_layers\": 3,"
            " \"n_head\": 8, \"tie_word_embeddings\": false, \"n_inner\": 1000}",
            &(gd_lm_config){.arch = GD_LM_GPT2, .dim = 256, .n_layers = 3, .n_heads = 8, .n_kv_heads = 8,
                            .head_dim = 32, .hidden_dim = 1000, .vocab_size = 50257, .vocab_padded = 50257,
                            .max_seq = 1024, .norm_eps = 1e-5});
    /* transformers 5's rope_parameters, per layer type or flat, and a default rope_scaling */
    gd_lm_config rp = {.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2, .head_dim = 32,
                       .hidden_dim = 11008, .vocab_size = 32000, .vocab_padded = 32000, .max_seq = 2048,
                       .rope_theta = 5e5, .norm_eps = 1e-6};
    read_ok("rope-params.json",
            "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
            " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}}",
            &rp);
    read_ok("rope-layer.json",
            "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
            " \"rope_theta\": 1.0, \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\","
            " \"rope_theta\": 500000}}}",
            &rp);
    read_ok("rope-default.json",
            "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
            " \"rope_theta\": 500000, \"rope_scaling\": {\"type\": \"default\"}}",
            &rp);
    /* a sliding window that no layer reaches (max_window_layers >= layers) changes nothing */
    read_ok("qwen2-window-unused.json",
            "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 4,"
            " \"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 4,"
            " \"intermediate_size\": 128, \"vocab_size\": 10, \"max_position_embeddings\": 64}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 4, .n_heads = 2, .n_kv_heads = 2,
                            .head_dim = 32, .hidden_dim = 128, .vocab_size = 10, .vocab_padded = 10, .max_seq = 64,
                            .rope_theta = 1e4, .norm_eps = 1e-6, .attn_bias = 1});
    /* gradus's padded vocabulary */
    read_ok("padded.json", "{\"model_type\": \"gpt2\", \"vocab_size\": 50304, \"gradus_vocab_size\": 50257}",
            &(gd_lm_config){.arch = GD_LM_GPT2, .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                            .head_dim = 64, .hidden_dim = 3072, .vocab_size = 50257, .vocab_padded = 50304,
                            .max_seq = 1024, .norm_eps = 1e-5, .tied_embeddings = 1});

    /* Llama 3.1's RoPE scaling, read into the config (the rest as LlamaConfig's defaults) */
    read_ok("llama3-rope.json",
            "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0,"
            " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
            " \"rope_type\": \"llama3\"}}",
            &(gd_lm_config){.arch = GD_LM_LLAMA, .dim = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32,
                            .head_dim = 128, .hidden_dim = 11008, .vocab_size = 32000, .vocab_padded = 32000,
                            .max_seq = 2048, .rope_theta = 500000.0, .norm_eps = 1e-6, .rope_factor = 8.0,
                            .rope_low_freq_factor = 1.0, .rope_high_freq_factor = 4.0, .rope_original_max = 8192});

    /* keys that change the model */
    const char *L = "{\"architectures\": [\"LlamaForCausalLM\"], ";
    char buf[512];
#define REFUSE(file, rest, st, n1, n2)                       \
    do {                                                     \
        snprintf(buf, sizeof buf, "%s%s", L, rest);          \
        read_refused(file, buf, st, n1, n2);                 \
    } while (0)
    REFUSE("llama3-rope-partial.json",
           "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
           " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
           GD_ERR_FORMAT, "'rope_scaling' of type llama3", "'high_freq_factor'");
    REFUSE("llama3-rope-inverted.json",
           "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0,"
           " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
           GD_ERR_FORMAT, "'rope_scaling'", "low_freq_factor < high_freq_factor");
    REFUSE("linear-rope.json", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", GD_ERR_UNSUPPORTED,
           "'rope_scaling'", "'linear'");
    REFUSE("untyped-rope.json", "\"rope_scaling\": {\"factor\": 2.0}}", GD_ERR_UNSUPPORTED, "'rope_scaling'",
           "no rope_type");
    REFUSE("yarn-params.json", "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", GD_ERR_UNSUPPORTED,
           "'rope_parameters'", "'yarn'");
    REFUSE("partial.json", "\"partial_rotary_factor\": 0.5}", GD_ERR_UNSUPPORTED, "'partial_rotary_factor'", NULL);
    REFUSE("sliding-layers.json", "\"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1e4},"
                                  " \"sliding_attention\": {\"rope_theta\": 1e4}}}",
           GD_ERR_UNSUPPORTED, "'rope_parameters'", "sliding_attention");
    REFUSE("attn-bias.json", "\"attention_bias\": true}", GD_ERR_UNSUPPORTED, "'attention_bias' is true", NULL);
    REFUSE("mlp-bias.json", "\"mlp_bias\": true}", GD_ERR_UNSUPPORTED, "'mlp_bias' is true", NULL);
    REFUSE("gelu.json", "\"hidden_act\": \"gelu\"}", GD_ERR_UNSUPPORTED, "'hidden_act'", "gelu");
    REFUSE("quant.json", "\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}}", GD_ERR_UNSUPPORTED,
           "'quantization_config'", NULL);
    REFUSE("string-size.json", "\"hidden_size\": \"big\"}", GD_ERR_FORMAT, "'hidden_size'", "positive integer");
    REFUSE("neg-size.json", "\"num_hidden_layers\": -2}", GD_ERR_FORMAT, "'num_hidden_layers'", NULL);
    REFUSE("frac-size.json", "\"vocab_size\": 100.5}", GD_ERR_FORMAT, "'vocab_size'", NULL);
    REFUSE("eps.json", "\"rms_norm_eps\": \"small\"}", GD_ERR_FORMAT, "'rms_norm_eps'", NULL);
    REFUSE("inf-theta.json", "\"rope_theta\": 1e999}", GD_ERR_FORMAT, "'rope_theta'", NULL);
    REFUSE("tie.json", "\"tie_word_embeddings\": 1}", GD_ERR_FORMAT, "'tie_word_embeddings'", NULL);
    REFUSE("indivisible.json", "\"hidden_size\": 100, \"num_attention_heads\": 3}", GD_ERR_INVALID,
           "dim = 100 is not divisible by n_heads = 3", NULL);
    REFUSE("kv.json", "\"num_key_value_heads\": 5}", GD_ERR_INVALID, "n_kv_heads = 5", NULL);
    REFUSE("padded-less.json", "\"vocab_size\": 100, \"gradus_vocab_size\": 101}", GD_ERR_FORMAT,
           "'gradus_vocab_size'", NULL);
    REFUSE("mistype.json", "\"model_type\": \"mistral\"}", GD_ERR_UNSUPPORTED, "'model_type' mistral",
           "LlamaForCausalLM");
#undef REFUSE
    read_refused("qwen2-window.json",
                 "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 24, \"use_sliding_window\": true,"
                 " \"max_window_layers\": 21}",
                 GD_ERR_UNSUPPORTED, "'use_sliding_window'", "layers 21 on");
    read_refused("qwen2-window-all.json",
                 "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2, \"use_sliding_window\": true,"
                 " \"max_window_layers\": 0, \"sliding_window\": 8}",
                 GD_ERR_UNSUPPORTED, "'use_sliding_window'", "layers 0 on");
    read_refused("qwen3-layer-types.json",
                 "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\","
                 " \"sliding_attention\"]}",
                 GD_ERR_UNSUPPORTED, "'layer_types'[1]", NULL);
    read_refused("qwen3-bias.json", "{\"model_type\": \"qwen3\", \"attention_bias\": true}", GD_ERR_UNSUPPORTED,
                 "'attention_bias'", NULL);
    read_refused("gpt2-relu.json", "{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}", GD_ERR_UNSUPPORTED,
                 "'activation_function'", "relu");
    read_refused("gpt2-scale.json", "{\"model_type\": \"gpt2\", \"scale_attn_weights\": false}", GD_ERR_UNSUPPORTED,
                 "'scale_attn_weights' is false", NULL);
    read_refused("gpt2-layer-scale.json", "{\"model_type\": \"gpt2\", \"scale_attn_by_inverse_layer_idx\": true}",
                 GD_ERR_UNSUPPORTED, "'scale_attn_by_inverse_layer_idx'", NULL);
    read_refused("gpt2-cross.json", "{\"model_type\": \"gpt2\", \"add_cross_attention\": true}", GD_ERR_UNSUPPORTED,
                 "'add_cross_attention'", NULL);
    read_refused("gpt2-heads.json", "{\"model_type\": \"gpt2\", \"n_embd\": 100, \"n_head\": 3}", GD_ERR_INVALID,
                 "dim = 100", "n_heads = 3");
    read_refused("mistral.json", "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\"}",
                 GD_ERR_UNSUPPORTED, "'architectures' names MistralForCausalLM", "GPT2LMHeadModel");
    read_refused("two-archs.json", "{\"architectures\": [\"LlamaForCausalLM\", \"GPT2LMHeadModel\"]}",
                 GD_ERR_UNSUPPORTED, "LlamaForCausalLM", "GPT2LMHeadModel");
    read_refused("no-arch.json", "{\"hidden_size\": 64}", GD_ERR_FORMAT, "neither 'architectures' nor 'model_type'",
                 NULL);
    read_refused("empty-arch.json", "{\"architectures\": []}", GD_ERR_FORMAT, "'architectures'", NULL);
    read_refused("array.json", "[1, 2]", GD_ERR_FORMAT, "not a JSON object", NULL);
    read_refused("bad.json", "{\"model_type\": \"llama\",}", GD_ERR_FORMAT, "not valid JSON", "at byte");

    gd_lm_config c;
    CHECK(gd_lm_config_read(ctx, tmp_path("absent.json"), &c) == GD_ERR_IO, "missing file");
    check_error("missing", (const char *[]){"absent.json", "cannot open", NULL});
    CHECK(gd_lm_config_read(ctx, dir, &c) == GD_ERR_IO, "a directory");
    CHECK(gd_lm_config_read(ctx, NULL, &c) == GD_ERR_INVALID && gd_lm_config_read(ctx, "x", NULL) == GD_ERR_INVALID,
          "NULL arguments");
    const char *j = "{\"model_type\": \"gpt2\"}";
    CHECK(gd_lm_config_parse(ctx, j, strlen(j), NULL, &c) == GD_OK && c.dim == 768, "parse from memory");
    CHECK(gd_lm_config_parse(ctx, NULL, 3, "x", &c) == GD_ERR_INVALID, "NULL text");
}

/* ---- writing ------------------------------------------------------------------------------ */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *b = calloc(1, 1 << 16);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

static void round_trips(void)
{
    const char *names[] = {"tiny", "stories15m", "stories42m", "stories110m", "qwen3-0.6b-shape", "gpt2-124m"};
    const char *classes[] = {"LlamaForCausalLM", "LlamaForCausalLM", "LlamaForCausalLM", "LlamaForCausalLM",
                             "Qwen3ForCausalLM", "GPT2LMHeadModel"};
    for (int i = 0; i < 6; i++) {
        gd_lm_config c, back;
        CHECK(gd_lm_preset(ctx, names[i], &c) == GD_OK, "%s", names[i]);
        const char *path = tmp_path("config.json");
        gd_status st = gd_lm_config_write(ctx, &c, path);
        CHECK(st == GD_OK, "write %s: %s", names[i], gd_ctx_error(ctx));
        char *text = slurp(path);
        CHECK(text != NULL && strstr(text, classes[i]) != NULL, "%s is written as %s", names[i], classes[i]);
        CHECK(text != NULL && strstr(text, "\"torch_dtype\":\"float32\"") != NULL, "%s has torch_dtype", names[i]);
        free(text);
        st = gd_lm_config_read(ctx, path, &back);
        CHECK(st == GD_OK, "read back %s: %s", names[i], gd_ctx_error(ctx));
        if (st == GD_OK) expect_config(names[i], &back, &c);
    }
    /* odd shapes, Qwen2's biases, a padded vocabulary */
    gd_lm_config odd = {.arch = GD_LM_LLAMA, .dim = 30, .n_layers = 3, .n_heads = 5, .n_kv_heads = 1, .hidden_dim = 77,
                        .vocab_size = 1001, .vocab_padded = 1024, .max_seq = 33, .rope_theta = 12345.678,
                        .norm_eps = 3e-7, .attn_bias = 1};
    gd_lm_config back;
    const char *path = tmp_path("odd.json");
    CHECK(gd_lm_config_write(ctx, &odd, path) == GD_OK, "write odd: %s", gd_ctx_error(ctx));
    CHECK(gd_lm_config_check(ctx, &odd) == GD_OK, "check odd");
    CHECK(gd_lm_config_read(ctx, path, &back) == GD_OK, "read odd: %s", gd_ctx_error(ctx));
    expect_config("odd", &back, &odd);
    char *text = slurp(path);
    CHECK(text != NULL && strstr(text, "Qwen2ForCausalLM") && strstr(text, "\"gradus_vocab_size\":1001") &&
              strstr(text, "\"vocab_size\":1024") && strstr(text, "\"rope_theta\":12345.678"),
          "odd config text: %s", text ? text : "(none)");
    free(text);

    /* Llama 3's RoPE scaling is written as rope_scaling and read back */
    gd_lm_config l3 = {.arch = GD_LM_LLAMA, .dim = 64, .n_layers = 1, .n_heads = 4, .vocab_size = 100, .max_seq = 64,
                       .rope_theta = 5e5, .norm_eps = 1e-5, .rope_factor = 8, .rope_low_freq_factor = 1,
                       .rope_high_freq_factor = 4, .rope_original_max = 16};
    CHECK(gd_lm_config_check(ctx, &l3) == GD_OK, "check llama3: %s", gd_ctx_error(ctx));
    path = tmp_path("llama3.json");
    CHECK(gd_lm_config_write(ctx, &l3, path) == GD_OK && gd_lm_config_read(ctx, path, &back) == GD_OK,
          "llama3 round trip: %s", gd_ctx_error(ctx));
    expect_config("llama3", &back, &l3);

    /* what no transformers class can hold */
    gd_lm_config c = odd;
    c.qk_norm = 1;
    CHECK(gd_lm_config_write(ctx, &c, path) == GD_ERR_UNSUPPORTED, "qk_norm with biases");
    check_error("qk_norm+bias", (const char *[]){path, "qk_norm", "attn_bias", NULL});
    c = odd;
    c.head_dim = 8;
    CHECK(gd_lm_config_write(ctx, &c, path) == GD_ERR_UNSUPPORTED, "Qwen2 with heads not spanning dim");
    check_error("qwen2 head_dim", (const char *[]){path, "head_dim = 8", NULL});
    c = (gd_lm_config){.arch = GD_LM_LLAMA, .dim = 100, .n_layers = 1, .n_heads = 3, .head_dim = 34, .vocab_size = 10,
                       .max_seq = 8, .rope_theta = 1e4, .norm_eps = 1e-5};
    CHECK(gd_lm_config_write(ctx, &c, path) == GD_ERR_UNSUPPORTED, "Llama with dim not divisible by heads");
    check_error("llama dim", (const char *[]){path, "dim = 100", "LlamaConfig", NULL});
    c.qk_norm = 1; /* Qwen3Config has no such rule */
    CHECK(gd_lm_config_write(ctx, &c, path) == GD_OK, "Qwen3 with head_dim 34 across dim 100: %s", gd_ctx_error(ctx));
    CHECK(gd_lm_config_read(ctx, path, &back) == GD_OK && back.head_dim == 34 && back.qk_norm, "read back");
    c.dim = 0;
    CHECK(gd_lm_config_write(ctx, &c, path) == GD_ERR_INVALID, "a config the check refuses");
    check_error("bad config", (const char *[]){path, "dim = 0", NULL});
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/missing/config.json", dir);
    CHECK(gd_lm_config_write(ctx, &odd, nodir) == GD_ERR_IO, "unwritable");
    check_error("nodir", (const char *[]){nodir, NULL});
    CHECK(gd_lm_config_write(ctx, NULL, path) == GD_ERR_INVALID && gd_lm_config_write(ctx, &odd, NULL) == GD_ERR_INVALID,
          "NULL arguments");
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    snprintf(dir, sizeof dir, "%s/gd-cfg-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    presets();
    check();
    read_files();
    round_trips();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_lm_config");
}
