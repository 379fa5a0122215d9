/* lm_config.c — language-model configs: the presets, and the check that fills the derived
 * fields and refuses dims that disagree, naming the field.
 *
 * The check is what lets every later stage (the model builder, checkpoints, the config
 * writer) trust a config: sizes positive, heads that divide, and a parameter count that
 * fits int64 (computed without wrapping), so that no product of two fields can overflow
 * further on. Beyond that any shape is allowed: odd head counts, head sizes that are not a
 * multiple of anything, vocabularies of any size.
 */
#include "gradus_lm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- presets ---------------------------------------------------------------------------- */

typedef struct preset {
    const char *name;
    gd_lm_config cfg;
} preset;

static const preset presets[] = {
    /* For tests and the CPU main job: ~1.3 M parameters (0.26 M in each of the embedding
     * and the output, which stay untied here so that the untied path is exercised; every
     * other preset ties them). A training step of 8 x 256 tokens is ~16 GFLOP. */
    {"tiny",
     {.arch = GD_LM_LLAMA, .dim = 128, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .hidden_dim = 384,
      .vocab_size = 2048, .max_seq = 256, .rope_theta = 1e4, .norm_eps = 1e-5}},
    /* Karpathy's llama2.c TinyStories models (tied embeddings, 32000-token Llama 2 vocab;
     * 42m uses llama2.c's multiple_of = 32 for its MLP width). */
    {"stories15m",
     {.arch = GD_LM_LLAMA, .dim = 288, .n_layers = 6, .n_heads = 6, .n_kv_heads = 6, .hidden_dim = 768,
      .vocab_size = 32000, .max_seq = 256, .rope_theta = 1e4, .norm_eps = 1e-5, .tied_embeddings = 1}},
    {"stories42m",
     {.arch = GD_LM_LLAMA, .dim = 512, .n_layers = 8, .n_heads = 8, .n_kv_heads = 8, .hidden_dim = 1376,
      .vocab_size = 32000, .max_seq = 1024, .rope_theta = 1e4, .norm_eps = 1e-5, .tied_embeddings = 1}},
    {"stories110m",
     {.arch = GD_LM_LLAMA, .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12, .hidden_dim = 2048,
      .vocab_size = 32000, .max_seq = 1024, .rope_theta = 1e4, .norm_eps = 1e-5, .tied_embeddings = 1}},
    /* Qwen3-0.6B's shapes (596 M parameters) with a training-sized context: the model
     * itself has max_position_embeddings 40960. */
    {"qwen3-0.6b-shape",
     {.arch = GD_LM_LLAMA, .dim = 1024, .n_layers = 28, .n_heads = 16, .n_kv_heads = 8, .head_dim = 128,
      .hidden_dim = 3072, .vocab_size = 151936, .max_seq = 1024, .rope_theta = 1e6, .norm_eps = 1e-6, .qk_norm = 1,
      .tied_embeddings = 1}},
    /* GPT-2 small; the 50257-token vocabulary padded to 50304 rows (a multiple of 64, for
     * the matmul kernels), whose extra logits training drives down. */
    {"gpt2-124m",
     {.arch = GD_LM_GPT2, .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12, .hidden_dim = 3072,
      .vocab_size = 50257, .vocab_padded = 50304, .max_seq = 1024, .norm_eps = 1e-5, .tied_embeddings = 1}},
};
#define N_PRESETS (int)(sizeof presets / sizeof presets[0])

gd_status gd_lm_preset(gd_ctx *ctx, const char *name, gd_lm_config *out)
{
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_preset: out is NULL");
    memset(out, 0, sizeof *out);
    if (name == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_preset: name is NULL");
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcmp(presets[i].name, name) != 0) continue;
        gd_lm_config c = presets[i].cfg;
        gd_status st = gd_lm_config_check(ctx, &c);
        if (st == GD_OK) *out = c;
        return st;
    }
    char known[256] = "";
    for (int i = 0; i < N_PRESETS; i++) {
        strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
        strncat(known, presets[i].name, sizeof known - strlen(known) - 1);
    }
    return gd_ctx_fail(ctx, GD_ERR_INVALID, "unknown model preset '%.64s' (known: %s)", name, known);
}

/* ---- parameter counts ------------------------------------------------------------------- */

/* acc += a * b; 0 on overflow. All operands are non-negative here. */
static int mac(int64_t *acc, int64_t a, int64_t b)
{
    int64_t p;
    return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(*acc, p, acc);
}

/* The count for a config whose derived fields are filled and positive, with dim at most
 * 2^40 (so that small multiples of it cannot wrap); 0 on overflow. */
static int count_params(const gd_lm_config *c, int64_t *out)
{
    int64_t D = c->dim, F = c->hidden_dim, V = c->vocab_padded, hd = c->head_dim;
    int64_t layer = 0, total = 0, q, kv;
    if (__builtin_mul_overflow(c->n_heads, hd, &q) || __builtin_mul_overflow(c->n_kv_heads, hd, &kv)) return 0;
    int ok = 1;
    if (c->arch == GD_LM_GPT2) {
        /* ln_1, c_attn (D -> 3D, bias), c_proj (D -> D, bias), ln_2, c_fc (D -> F, bias),
         * mlp c_proj (F -> D, bias); wte, wpe, ln_f */
        ok = mac(&layer, 4, D) && mac(&layer, 3 * D, q) && mac(&layer, 3, q) && mac(&layer, q, D) && mac(&layer, 1, D) &&
             mac(&layer, D, F) && mac(&layer, 1, F) && mac(&layer, F, D) && mac(&layer, 1, D) && mac(&total, V, D) &&
             mac(&total, c->max_seq, D) && mac(&total, 2, D);
    } else {
        /* attention and MLP norms, q/k/v/o, optional q/k/v biases and q/k norms, gate, up
         * and down projections; the embedding and the final norm */
        ok = mac(&layer, 2, D) && mac(&layer, D, q) && mac(&layer, 2 * D, kv) && mac(&layer, q, D) &&
             mac(&layer, 3 * D, F) && mac(&total, V, D) && mac(&total, 1, D);
        if (ok && c->attn_bias) ok = mac(&layer, 1, q) && mac(&layer, 2, kv);
        if (ok && c->qk_norm) ok = mac(&layer, 2, hd);
    }
    if (ok) ok = mac(&total, c->n_layers, layer);
    if (ok && !c->tied_embeddings) ok = mac(&total, V, D);
    if (ok) *out = total;
    return ok;
}

int64_t gd_lm_param_count(const gd_lm_config *cfg)
{
    if (cfg == NULL) return -1;
    gd_lm_config c = *cfg;
    int64_t n;
    if (gd_lm_config_check(NULL, &c) != GD_OK || !count_params(&c, &n)) return -1;
    return n;
}

/* ---- the check -------------------------------------------------------------------------- */

static gd_status bad(gd_ctx *ctx, const char *field, int64_t v, const char *why)
{
    return gd_ctx_fail(ctx, GD_ERR_INVALID, "model config: %s = %lld %s", field, (long long)v, why);
}

gd_status gd_lm_config_check(gd_ctx *ctx, gd_lm_config *cfg)
{
    if (cfg == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_config_check: cfg is NULL");
    gd_lm_config c = *cfg;
    int gpt2 = c.arch == GD_LM_GPT2;
    if (c.arch != GD_LM_LLAMA && !gpt2) return bad(ctx, "arch", (int64_t)c.arch, "is not an architecture gradus builds");
    /* Limits that keep every product of two fields (3 * dim, 2 * kv width, ...) far from
     * wrapping; the parameter count then bounds the rest. */
    const int64_t big = (int64_t)1 << 40;
    const struct {
        const char *name;
        int64_t v;
        int zero_ok; /* 0 asks for the derived value */
    } sizes[] = {
        {"dim", c.dim, 0},           {"n_layers", c.n_layers, 0},       {"n_heads", c.n_heads, 0},
        {"n_kv_heads", c.n_kv_heads, 1}, {"head_dim", c.head_dim, 1},   {"hidden_dim", c.hidden_dim, 1},
        {"vocab_size", c.vocab_size, 0}, {"vocab_padded", c.vocab_padded, 1}, {"max_seq", c.max_seq, 0},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i].v < 0 || (sizes[i].v == 0 && !sizes[i].zero_ok))
            return bad(ctx, sizes[i].name, sizes[i].v, "must be positive");
        if (sizes[i].v > big) return bad(ctx, sizes[i].name, sizes[i].v, "is absurdly large");
    }
    if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "model config: n_kv_heads = %lld does not divide n_heads = %lld",
                           (long long)c.n_kv_heads, (long long)c.n_heads);
    if (c.head_dim == 0) {
        if (c.dim % c.n_heads != 0)
            return gd_ctx_fail(ctx, GD_ERR_INVALID,
                               "model config: dim = %lld is not divisible by n_heads = %lld (set head_dim to choose the "
                               "head size)",
                               (long long)c.dim, (long long)c.n_heads);
        c.head_dim = c.dim / c.n_heads;
    }
    if (c.hidden_dim == 0) {
        /* llama2.c's rule: two thirds of 4 * dim (the gated MLP has three matrices where
         * GPT-2's has two), rounded up to a multiple of 256 */
        int64_t h = 4 * c.dim * 2 / 3;
        c.hidden_dim = gpt2 ? 4 * c.dim : (h + 255) / 256 * 256;
    }
    if (c.vocab_padded == 0) c.vocab_padded = c.vocab_size;
    c.qk_norm = c.qk_norm != 0;
    c.tied_embeddings = c.tied_embeddings != 0;
    c.attn_bias = c.attn_bias != 0;
    if (c.vocab_padded < c.vocab_size)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "model config: vocab_padded = %lld is less than vocab_size = %lld",
                           (long long)c.vocab_padded, (long long)c.vocab_size);
    if (!(c.norm_eps > 0) || !isfinite(c.norm_eps))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "model config: norm_eps = %g must be positive and finite", c.norm_eps);
    if (gpt2) {
        if (c.n_kv_heads != c.n_heads)
            return gd_ctx_fail(ctx, GD_ERR_INVALID,
                               "model config: n_kv_heads = %lld: GPT-2 has no grouped-query attention (n_heads = %lld)",
                               (long long)c.n_kv_heads, (long long)c.n_heads);
        if (c.head_dim * c.n_heads != c.dim)
            return gd_ctx_fail(ctx, GD_ERR_INVALID,
                               "model config: head_dim = %lld times n_heads = %lld must equal dim = %lld for GPT-2",
                               (long long)c.head_dim, (long long)c.n_heads, (long long)c.dim);
        if (c.qk_norm) return bad(ctx, "qk_norm", c.qk_norm, "is not part of GPT-2");
        if (c.attn_bias)
            return bad(ctx, "attn_bias", c.attn_bias, "is for the llama family (GPT-2's projections always have biases)");
        if (c.rope_factor != 0)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "model config: RoPE scaling is for the llama family (GPT-2 learns positions)");
    } else {
        if (c.rope_factor != 0 && !(c.rope_factor >= 1 && c.rope_low_freq_factor > 0 &&
                                    c.rope_high_freq_factor > c.rope_low_freq_factor && c.rope_original_max >= 1 &&
                                    isfinite(c.rope_factor) && isfinite(c.rope_high_freq_factor)))
            return gd_ctx_fail(ctx, GD_ERR_INVALID,
                               "model config: llama3 RoPE scaling wants factor >= 1, 0 < low_freq_factor < "
                               "high_freq_factor and original_max >= 1 (got %g, %g, %g, %lld)",
                               c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
                               (long long)c.rope_original_max);
        if (!(c.rope_theta > 0) || !isfinite(c.rope_theta))
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "model config: rope_theta = %g must be positive and finite",
                               c.rope_theta);
        if (c.head_dim % 2 != 0) return bad(ctx, "head_dim", c.head_dim, "must be even (RoPE rotates pairs)");
    }
    int64_t n;
    if (!count_params(&c, &n))
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "model config: the parameter count overflows (dim = %lld, n_layers = %lld, head_dim = %lld, "
                           "hidden_dim = %lld, vocab_padded = %lld)",
                           (long long)c.dim, (long long)c.n_layers, (long long)c.head_dim, (long long)c.hidden_dim,
                           (long long)c.vocab_padded);
    *cfg = c;
    return GD_OK;
}
