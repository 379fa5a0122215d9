/* hf_config.c — Hugging Face config.json for the model families gradus builds.
 *
 * Reading maps the keys of LlamaConfig, Qwen2Config, Qwen3Config and GPT2Config onto
 * gd_lm_config. A key left out (or null) takes the default of the transformers class,
 * since that is what transformers would build from the same file; the defaults below are
 * those of transformers' configuration_llama.py, configuration_qwen2.py,
 * configuration_qwen3.py and configuration_gpt2.py. A key whose value would make
 * transformers compute something gradus does not is refused, naming the key: loading the
 * weights into a different function and sampling garbage is worse than an error.
 *
 * Writing produces the keys those classes read, so that AutoConfig/AutoModelForCausalLM
 * build the class with the shapes of gradus's tensors.
 */
#include "atomic_file.h"
#include "file_read.h"
#include "gradus_lm.h"
#include "io/json.h"

#include "alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* config.json files are a few kilobytes; anything this large is not one. */
#define CONFIG_MAX_BYTES (16u << 20)

typedef enum family { FAM_LLAMA, FAM_QWEN2, FAM_QWEN3, FAM_GPT2 } family;

static const struct {
    const char *arch, *model_type;
    family fam;
} classes[] = {
    {"LlamaForCausalLM", "llama", FAM_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", FAM_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", FAM_QWEN3},
    {"GPT2LMHeadModel", "gpt2", FAM_GPT2},
};
#define N_CLASSES (int)(sizeof classes / sizeof classes[0])
#define KNOWN_ARCHS "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and GPT2LMHeadModel"

typedef struct reader {
    gd_ctx *ctx;
    const char *name;
    const gd_json *root;
} reader;

static gd_status rfail(const reader *r, gd_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static gd_status rfail(const reader *r, gd_status s, const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gd_ctx_fail(r->ctx, s, "%s: %s", r->name, msg);
}

/* Member `key` of obj, with null read as absent (transformers reads None as "use the
 * default" for every key used here). */
static const gd_json *member(const gd_json *obj, const char *key)
{
    const gd_json *v = gd_json_get(obj, key);
    return v != NULL && v->kind != GD_JSON_NULL ? v : NULL;
}

/* An integer key of at least `min`, or def when absent. */
static gd_status get_int_at_least(const reader *r, const char *key, int64_t min, int64_t def, int64_t *out)
{
    const gd_json *v = member(r->root, key);
    if (v == NULL) {
        *out = def;
        return GD_OK;
    }
    if (v->kind != GD_JSON_NUMBER || !v->is_int || v->i < min)
        return rfail(r, GD_ERR_FORMAT, "'%s' must be a%s integer", key, min > 0 ? " positive" : " non-negative");
    *out = v->i;
    return GD_OK;
}

/* A positive integer key (a size), or def when absent. */
static gd_status get_size(const reader *r, const char *key, int64_t def, int64_t *out)
{
    return get_int_at_least(r, key, 1, def, out);
}

/* A finite number under key in obj, or def when absent. */
static gd_status get_real(const reader *r, const gd_json *obj, const char *key, double def, double *out)
{
    const gd_json *v = member(obj, key);
    if (v == NULL) {
        *out = def;
        return GD_OK;
    }
    if (v->kind != GD_JSON_NUMBER || !isfinite(v->num)) return rfail(r, GD_ERR_FORMAT, "'%s' must be a finite number", key);
    *out = v->num;
    return GD_OK;
}

static gd_status get_flag(const reader *r, const char *key, int def, int *out)
{
    const gd_json *v = member(r->root, key);
    if (v == NULL) {
        *out = def;
        return GD_OK;
    }
    if (v->kind != GD_JSON_TRUE && v->kind != GD_JSON_FALSE) return rfail(r, GD_ERR_FORMAT, "'%s' must be true or false", key);
    *out = v->kind == GD_JSON_TRUE;
    return GD_OK;
}

/* A boolean key that must not be `bad` (gradus computes only the other case). */
static gd_status refuse_flag(const reader *r, const char *key, int def, int bad, const char *why)
{
    int v = def;
    gd_status st = get_flag(r, key, def, &v);
    if (st == GD_OK && v == bad)
        st = rfail(r, GD_ERR_UNSUPPORTED, "'%s' is %s, which gradus does not support: %s", key, bad ? "true" : "false",
                   why);
    return st;
}

/* ---- which class ------------------------------------------------------------------------ */

static gd_status find_family(const reader *r, family *fam)
{
    int from_arch = -1;
    const gd_json *archs = member(r->root, "architectures");
    if (archs != NULL) {
        if (archs->kind != GD_JSON_ARRAY || archs->len == 0)
            return rfail(r, GD_ERR_FORMAT, "'architectures' must be a non-empty list of class names");
        for (size_t i = 0; i < archs->len; i++) {
            const gd_json *a = archs->items[i];
            if (a->kind != GD_JSON_STRING) return rfail(r, GD_ERR_FORMAT, "'architectures' must list class names");
            int k = 0;
            while (k < N_CLASSES && strcmp(a->str, classes[k].arch) != 0) k++;
            if (k == N_CLASSES)
                return rfail(r, GD_ERR_UNSUPPORTED, "'architectures' names %.80s; gradus reads " KNOWN_ARCHS, a->str);
            if (from_arch >= 0 && classes[k].fam != classes[from_arch].fam)
                return rfail(r, GD_ERR_UNSUPPORTED, "'architectures' names both %s and %s", classes[from_arch].arch,
                             classes[k].arch);
            from_arch = k;
        }
    }
    const gd_json *mt = member(r->root, "model_type");
    int from_type = -1;
    if (mt != NULL) {
        if (mt->kind != GD_JSON_STRING) return rfail(r, GD_ERR_FORMAT, "'model_type' must be a string");
        int k = 0;
        while (k < N_CLASSES && strcmp(mt->str, classes[k].model_type) != 0) k++;
        if (k < N_CLASSES) from_type = k;
        else if (from_arch < 0)
            return rfail(r, GD_ERR_UNSUPPORTED, "'model_type' is %.80s; gradus reads llama, qwen2, qwen3 and gpt2",
                         mt->str);
        if (from_arch >= 0 && (from_type < 0 || classes[from_type].fam != classes[from_arch].fam))
            return rfail(r, GD_ERR_UNSUPPORTED, "'model_type' %.80s disagrees with 'architectures' %s", mt->str,
                         classes[from_arch].arch);
    }
    if (from_arch < 0 && from_type < 0)
        return rfail(r, GD_ERR_FORMAT, "neither 'architectures' nor 'model_type' says which model this is");
    *fam = classes[from_arch >= 0 ? from_arch : from_type].fam;
    return GD_OK;
}

/* ---- RoPE ------------------------------------------------------------------------------- */

/* One RoPE parameter object (rope_scaling of transformers 4, rope_parameters of 5): the
 * plain rotation ("default") or Llama 3's scaling ("llama3", with factor, low_freq_factor,
 * high_freq_factor and original_max_position_embeddings, all required as transformers
 * requires them); any theta in it wins over the top-level key. */
static gd_status rope_object(const reader *r, const char *key, const gd_json *obj, gd_lm_config *c)
{
    if (obj->kind != GD_JSON_OBJECT) return rfail(r, GD_ERR_FORMAT, "'%s' must be an object", key);
    const gd_json *type = member(obj, "rope_type");
    if (type == NULL) type = member(obj, "type"); /* the older spelling */
    if (type != NULL && type->kind != GD_JSON_STRING) return rfail(r, GD_ERR_FORMAT, "'%s': rope_type must be a string", key);
    if (type == NULL && member(obj, "rope_theta") == NULL && obj->len > 0)
        return rfail(r, GD_ERR_UNSUPPORTED, "'%s' has no rope_type: gradus computes the default RoPE and llama3's", key);
    int llama3 = type != NULL && strcmp(type->str, "llama3") == 0;
    if (type != NULL && strcmp(type->str, "default") != 0 && !llama3)
        return rfail(r, GD_ERR_UNSUPPORTED,
                     "'%s' of type '%.40s' is not supported: gradus computes the default RoPE and llama3's", key,
                     type->str);
    double prf = 1.0;
    gd_status st = get_real(r, obj, "partial_rotary_factor", 1.0, &prf);
    if (st == GD_OK && prf != 1.0)
        return rfail(r, GD_ERR_UNSUPPORTED, "'%s': partial_rotary_factor %g is not supported: gradus rotates whole heads",
                     key, prf);
    if (st == GD_OK) st = get_real(r, obj, "rope_theta", c->rope_theta, &c->rope_theta);
    if (st != GD_OK || !llama3) return st;
    static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"};
    for (int i = 0; i < 4; i++)
        if (member(obj, need[i]) == NULL) return rfail(r, GD_ERR_FORMAT, "'%s' of type llama3 has no '%s'", key, need[i]);
    double orig = 0;
    st = get_real(r, obj, "factor", 0, &c->rope_factor);
    if (st == GD_OK) st = get_real(r, obj, "low_freq_factor", 0, &c->rope_low_freq_factor);
    if (st == GD_OK) st = get_real(r, obj, "high_freq_factor", 0, &c->rope_high_freq_factor);
    if (st == GD_OK) st = get_real(r, obj, "original_max_position_embeddings", 0, &orig);
    if (st != GD_OK) return st;
    if (!(c->rope_factor >= 1) || !(c->rope_low_freq_factor > 0) ||
        !(c->rope_high_freq_factor > c->rope_low_freq_factor) || !(orig >= 1 && orig <= 1e12 && orig == floor(orig)))
        return rfail(r, GD_ERR_FORMAT,
                     "'%s': llama3 wants factor >= 1, 0 < low_freq_factor < high_freq_factor and a whole "
                     "original_max_position_embeddings (got %g, %g, %g, %g)",
                     key, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor, orig);
    c->rope_original_max = (int64_t)orig;
    return GD_OK;
}

static gd_status read_rope(const reader *r, gd_lm_config *c)
{
    double *theta = &c->rope_theta;
    /* rope_theta: 10000.0 by default in LlamaConfig, Qwen2Config and Qwen3Config (in
     * transformers 5 the default of rope_parameters, the same value) */
    gd_status st = get_real(r, r->root, "rope_theta", 10000.0, theta);
    double prf = 1.0;
    if (st == GD_OK) st = get_real(r, r->root, "partial_rotary_factor", 1.0, &prf);
    if (st == GD_OK && prf != 1.0)
        return rfail(r, GD_ERR_UNSUPPORTED, "'partial_rotary_factor' %g is not supported: gradus rotates whole heads", prf);
    const gd_json *scaling = member(r->root, "rope_scaling");
    if (st == GD_OK && scaling != NULL) st = rope_object(r, "rope_scaling", scaling, c);
    const gd_json *params = member(r->root, "rope_parameters");
    if (st == GD_OK && params != NULL) {
        if (params->kind != GD_JSON_OBJECT) return rfail(r, GD_ERR_FORMAT, "'rope_parameters' must be an object");
        /* transformers 5 may key them by layer type; every layer here is full attention */
        const gd_json *full = member(params, "full_attention");
        if (full != NULL && full->kind == GD_JSON_OBJECT) {
            for (size_t i = 0; i < params->len; i++)
                if (strcmp(params->keys[i], "full_attention") != 0 && params->items[i]->kind == GD_JSON_OBJECT)
                    return rfail(r, GD_ERR_UNSUPPORTED, "'rope_parameters' for layer type '%.40s' is not supported",
                                 params->keys[i]);
            params = full;
        }
        st = rope_object(r, "rope_parameters", params, c);
    }
    if (st == GD_OK && !(*theta > 0)) return rfail(r, GD_ERR_FORMAT, "'rope_theta' must be positive");
    return st;
}

/* ---- the families ----------------------------------------------------------------------- */

static gd_status read_llama(const reader *r, family fam, gd_lm_config *c)
{
    /* Defaults: vocab_size 32000 (Llama) / 151936 (Qwen2, Qwen3); hidden_size 4096;
     * intermediate_size 11008 (Llama) / 22016 (Qwen2, Qwen3); num_hidden_layers 32;
     * num_attention_heads 32; num_key_value_heads None -> num_attention_heads (Llama; Qwen
     * default 32, None likewise); head_dim None -> hidden_size // heads (Llama; Qwen2 reads
     * head_dim if given), 128 (Qwen3); max_position_embeddings 2048 (Llama) / 32768 (Qwen);
     * rms_norm_eps 1e-6; tie_word_embeddings False; hidden_act "silu". */
    int llama = fam == FAM_LLAMA;
    c->arch = GD_LM_LLAMA;
    gd_status st = get_size(r, "vocab_size", llama ? 32000 : 151936, &c->vocab_size);
    if (st == GD_OK) st = get_size(r, "hidden_size", 4096, &c->dim);
    if (st == GD_OK) st = get_size(r, "intermediate_size", llama ? 11008 : 22016, &c->hidden_dim);
    if (st == GD_OK) st = get_size(r, "num_hidden_layers", 32, &c->n_layers);
    if (st == GD_OK) st = get_size(r, "num_attention_heads", 32, &c->n_heads);
    if (st == GD_OK) st = get_size(r, "num_key_value_heads", c->n_heads, &c->n_kv_heads);
    if (st == GD_OK) st = get_size(r, "head_dim", fam == FAM_QWEN3 ? 128 : 0, &c->head_dim);
    if (st == GD_OK) st = get_size(r, "max_position_embeddings", llama ? 2048 : 32768, &c->max_seq);
    if (st == GD_OK) st = get_real(r, r->root, "rms_norm_eps", 1e-6, &c->norm_eps);
    if (st == GD_OK) st = get_flag(r, "tie_word_embeddings", 0, &c->tied_embeddings);
    if (st == GD_OK) st = read_rope(r, c);
    if (st != GD_OK) return st;
    c->qk_norm = fam == FAM_QWEN3;
    /* Qwen2's attention has q, k and v biases whatever the config says (bias=True in
     * modeling_qwen2.py); Llama and Qwen3 switch all four projections' biases with
     * attention_bias (default False), which gradus does not have. */
    c->attn_bias = fam == FAM_QWEN2;
    if (fam != FAM_QWEN2)
        st = refuse_flag(r, "attention_bias", 0, 1, "gradus's attention projections have no biases");
    if (st == GD_OK && llama) st = refuse_flag(r, "mlp_bias", 0, 1, "gradus's MLP projections have no biases");
    const gd_json *act = member(r->root, "hidden_act");
    if (st == GD_OK && act != NULL &&
        (act->kind != GD_JSON_STRING || (strcmp(act->str, "silu") != 0 && strcmp(act->str, "swish") != 0)))
        st = rfail(r, GD_ERR_UNSUPPORTED, "'hidden_act' is %.40s: gradus's llama MLP computes silu",
                   act->kind == GD_JSON_STRING ? act->str : "not a string");
    if (st != GD_OK || llama) return st;

    /* Qwen: a sliding window applies to layers from max_window_layers (default 28) on when
     * use_sliding_window (default False) is set and sliding_window (default 4096) is not
     * null; layer_types, where given, says it per layer. */
    int sliding = 0;
    int64_t from_layer = 28;
    st = get_flag(r, "use_sliding_window", 0, &sliding);
    if (st == GD_OK) st = get_int_at_least(r, "max_window_layers", 0, 28, &from_layer);
    const gd_json *window = gd_json_get(r->root, "sliding_window"); /* absent: 4096; null: off */
    if (st == GD_OK && sliding && (window == NULL || window->kind != GD_JSON_NULL) && from_layer < c->n_layers)
        return rfail(r, GD_ERR_UNSUPPORTED,
                     "'use_sliding_window' is true (layers %lld on): gradus computes full attention in every layer",
                     (long long)from_layer);
    const gd_json *types = member(r->root, "layer_types");
    if (st == GD_OK && types != NULL) {
        if (types->kind != GD_JSON_ARRAY) return rfail(r, GD_ERR_FORMAT, "'layer_types' must be a list");
        for (size_t i = 0; i < types->len; i++)
            if (types->items[i]->kind != GD_JSON_STRING || strcmp(types->items[i]->str, "full_attention") != 0)
                return rfail(r, GD_ERR_UNSUPPORTED,
                             "'layer_types'[%zu] is not full_attention: gradus computes full attention in every layer",
                             i);
    }
    return st;
}

static gd_status read_gpt2(const reader *r, gd_lm_config *c)
{
    /* GPT2Config defaults: vocab_size 50257, n_positions 1024, n_embd 768, n_layer 12,
     * n_head 12, n_inner None -> 4 * n_embd, activation_function "gelu_new",
     * layer_norm_epsilon 1e-5, tie_word_embeddings True (PretrainedConfig's default),
     * scale_attn_weights True, scale_attn_by_inverse_layer_idx False. The attribute_map
     * names hidden_size, max_position_embeddings, num_attention_heads and
     * num_hidden_layers; set in a file, they override the GPT-2 names. */
    static const char *const keys[4][2] = {{"n_embd", "hidden_size"},
                                           {"n_layer", "num_hidden_layers"},
                                           {"n_head", "num_attention_heads"},
                                           {"n_positions", "max_position_embeddings"}};
    int64_t *dst[4] = {&c->dim, &c->n_layers, &c->n_heads, &c->max_seq};
    const int64_t def[4] = {768, 12, 12, 1024};
    c->arch = GD_LM_GPT2;
    gd_status st = GD_OK;
    for (int k = 0; k < 4 && st == GD_OK; k++) {
        st = get_size(r, keys[k][0], def[k], dst[k]);
        if (st == GD_OK) st = get_size(r, keys[k][1], *dst[k], dst[k]);
    }
    if (st == GD_OK) st = get_size(r, "vocab_size", 50257, &c->vocab_size);
    if (st == GD_OK) st = get_size(r, "n_inner", 0, &c->hidden_dim);
    if (st == GD_OK) st = get_real(r, r->root, "layer_norm_epsilon", 1e-5, &c->norm_eps);
    if (st == GD_OK) st = get_flag(r, "tie_word_embeddings", 1, &c->tied_embeddings);
    if (st == GD_OK) st = refuse_flag(r, "scale_attn_weights", 1, 0, "gradus scales attention scores by 1/sqrt(head_dim)");
    if (st == GD_OK)
        st = refuse_flag(r, "scale_attn_by_inverse_layer_idx", 0, 1, "gradus does not scale attention by layer");
    if (st == GD_OK) st = refuse_flag(r, "add_cross_attention", 0, 1, "gradus's GPT-2 has no cross-attention");
    const gd_json *act = member(r->root, "activation_function");
    /* gelu_new and gelu_pytorch_tanh are both the tanh approximation of GELU */
    if (st == GD_OK && act != NULL &&
        (act->kind != GD_JSON_STRING || (strcmp(act->str, "gelu_new") != 0 && strcmp(act->str, "gelu_pytorch_tanh") != 0)))
        st = rfail(r, GD_ERR_UNSUPPORTED, "'activation_function' is %.40s: gradus's GPT-2 MLP computes gelu_new",
                   act->kind == GD_JSON_STRING ? act->str : "not a string");
    return st;
}

gd_status gd_lm_config_parse(gd_ctx *ctx, const char *json, size_t n, const char *name, gd_lm_config *out)
{
    if (name == NULL) name = "config.json";
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: out is NULL", name);
    memset(out, 0, sizeof *out);
    if (json == NULL && n > 0) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the text is NULL", name);
    char err[160];
    gd_json_doc *doc = gd_json_parse(json, n, 0, err, sizeof err);
    if (doc == NULL)
        return gd_ctx_fail(ctx, strstr(err, "out of memory") ? GD_ERR_NOMEM : GD_ERR_FORMAT, "%s: not valid JSON: %s",
                           name, err);
    reader r = {ctx, name, gd_json_root(doc)};
    gd_lm_config c = {0};
    family fam = FAM_LLAMA;
    gd_status st = r.root->kind == GD_JSON_OBJECT ? GD_OK : rfail(&r, GD_ERR_FORMAT, "not a JSON object");
    if (st == GD_OK) st = find_family(&r, &fam);
    if (st == GD_OK && member(r.root, "quantization_config") != NULL)
        st = rfail(&r, GD_ERR_UNSUPPORTED, "'quantization_config' is set: gradus reads unquantized weights only");
    if (st == GD_OK) st = fam == FAM_GPT2 ? read_gpt2(&r, &c) : read_llama(&r, fam, &c);
    /* gradus_vocab_size: the tokenizer's size when the embedding rows (vocab_size) are
     * padded; only gradus writes it */
    int64_t real_vocab = 0;
    if (st == GD_OK) st = get_size(&r, "gradus_vocab_size", c.vocab_size, &real_vocab);
    if (st == GD_OK && real_vocab > c.vocab_size)
        st = rfail(&r, GD_ERR_FORMAT, "'gradus_vocab_size' %lld is more than 'vocab_size' %lld", (long long)real_vocab,
                   (long long)c.vocab_size);
    if (st == GD_OK) {
        c.vocab_padded = c.vocab_size;
        c.vocab_size = real_vocab;
        st = gd_lm_config_check(ctx, &c);
        if (st != GD_OK) st = gd_ctx_fail(ctx, st, "%s: %s", name, gd_ctx_error(ctx));
    }
    gd_json_free(doc);
    if (st == GD_OK) *out = c;
    return st;
}

gd_status gd_lm_config_read(gd_ctx *ctx, const char *path, gd_lm_config *out)
{
    if (out != NULL) memset(out, 0, sizeof *out);
    if (path == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_config_read: path is NULL");
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: out is NULL", path);
    char *buf;
    size_t len;
    gd_status st = gd_read_whole_file(ctx, path, CONFIG_MAX_BYTES, "a config.json", &buf, &len);
    if (st != GD_OK) return st;
    st = gd_lm_config_parse(ctx, buf, len, path, out);
    gd_free(buf);
    return st;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* A real number written with a fraction or exponent, so that Python reads a float (the
 * config classes declare these keys float). */
static void put_float(gd_json_out *o, double v)
{
    char b[40];
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(b, sizeof b, "%.1f", v);
        gd_json_raw(o, b, strlen(b));
    } else {
        gd_json_number(o, v);
    }
}

static void put_int(gd_json_out *o, const char *key, int64_t v)
{
    gd_json_key(o, key);
    gd_json_int(o, v);
}

gd_status gd_lm_config_write(gd_ctx *ctx, const gd_lm_config *cfg, const char *path)
{
    if (path == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_config_write: path is NULL");
    if (cfg == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the config is NULL", path);
    gd_lm_config c = *cfg;
    gd_status st = gd_lm_config_check(ctx, &c);
    if (st != GD_OK) return gd_ctx_fail(ctx, st, "%s: %s", path, gd_ctx_error(ctx));
    const char *arch, *type;
    if (c.arch == GD_LM_GPT2) {
        arch = "GPT2LMHeadModel", type = "gpt2";
    } else if (c.qk_norm) {
        if (c.attn_bias)
            return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED,
                               "%s: qk_norm with attn_bias: no transformers class has q/k/v biases with q/k norms", path);
        arch = "Qwen3ForCausalLM", type = "qwen3";
    } else if (c.attn_bias) {
        /* Qwen2 has always taken head_dim as hidden_size // heads in some versions */
        if (c.head_dim * c.n_heads != c.dim)
            return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED,
                               "%s: head_dim = %lld with n_heads = %lld does not span dim = %lld, which Qwen2 requires",
                               path, (long long)c.head_dim, (long long)c.n_heads, (long long)c.dim);
        arch = "Qwen2ForCausalLM", type = "qwen2";
    } else {
        /* LlamaConfig refuses hidden_size not divisible by num_attention_heads even when
         * head_dim is given */
        if (c.dim % c.n_heads != 0)
            return gd_ctx_fail(ctx, GD_ERR_UNSUPPORTED,
                               "%s: dim = %lld is not divisible by n_heads = %lld, which LlamaConfig requires", path,
                               (long long)c.dim, (long long)c.n_heads);
        arch = "LlamaForCausalLM", type = "llama";
    }
    gd_json_out o = {0};
    gd_json_begin_object(&o);
    gd_json_key(&o, "architectures");
    gd_json_begin_array(&o);
    gd_json_cstring(&o, arch);
    gd_json_end_array(&o);
    gd_json_key(&o, "model_type");
    gd_json_cstring(&o, type);
    /* the dtype gradus keeps parameters in, which from_pretrained(torch_dtype="auto") uses */
    gd_json_key(&o, "torch_dtype");
    gd_json_cstring(&o, "float32");
    /* embedding rows; the tokenizer's size beside it when they differ */
    put_int(&o, "vocab_size", c.vocab_padded);
    if (c.vocab_padded != c.vocab_size) put_int(&o, "gradus_vocab_size", c.vocab_size);
    if (c.arch == GD_LM_GPT2) {
        put_int(&o, "n_embd", c.dim);
        put_int(&o, "n_layer", c.n_layers);
        put_int(&o, "n_head", c.n_heads);
        put_int(&o, "n_positions", c.max_seq);
        put_int(&o, "n_ctx", c.max_seq); /* read by old transformers */
        put_int(&o, "n_inner", c.hidden_dim);
        gd_json_key(&o, "activation_function");
        gd_json_cstring(&o, "gelu_new");
        gd_json_key(&o, "layer_norm_epsilon");
        put_float(&o, c.norm_eps);
        gd_json_key(&o, "scale_attn_weights");
        gd_json_bool(&o, 1);
        gd_json_key(&o, "scale_attn_by_inverse_layer_idx");
        gd_json_bool(&o, 0);
        gd_json_key(&o, "reorder_and_upcast_attn");
        gd_json_bool(&o, 0);
    } else {
        put_int(&o, "hidden_size", c.dim);
        put_int(&o, "intermediate_size", c.hidden_dim);
        put_int(&o, "num_hidden_layers", c.n_layers);
        put_int(&o, "num_attention_heads", c.n_heads);
        put_int(&o, "num_key_value_heads", c.n_kv_heads);
        put_int(&o, "head_dim", c.head_dim);
        put_int(&o, "max_position_embeddings", c.max_seq);
        gd_json_key(&o, "rope_theta");
        put_float(&o, c.rope_theta);
        gd_json_key(&o, "rope_scaling");
        if (c.rope_factor > 0) {
            gd_json_begin_object(&o);
            gd_json_key(&o, "rope_type");
            gd_json_cstring(&o, "llama3");
            gd_json_key(&o, "factor");
            put_float(&o, c.rope_factor);
            gd_json_key(&o, "low_freq_factor");
            put_float(&o, c.rope_low_freq_factor);
            gd_json_key(&o, "high_freq_factor");
            put_float(&o, c.rope_high_freq_factor);
            put_int(&o, "original_max_position_embeddings", c.rope_original_max);
            gd_json_end_object(&o);
        } else {
            gd_json_null(&o);
        }
        gd_json_key(&o, "rms_norm_eps");
        put_float(&o, c.norm_eps);
        gd_json_key(&o, "hidden_act");
        gd_json_cstring(&o, "silu");
        if (!c.attn_bias) {
            gd_json_key(&o, "attention_bias");
            gd_json_bool(&o, 0);
        }
        if (!c.qk_norm && !c.attn_bias) {
            gd_json_key(&o, "mlp_bias");
            gd_json_bool(&o, 0);
        } else {
            gd_json_key(&o, "use_sliding_window");
            gd_json_bool(&o, 0);
        }
    }
    gd_json_key(&o, "tie_word_embeddings");
    gd_json_bool(&o, c.tied_embeddings != 0);
    gd_json_end_object(&o);
    gd_json_raw(&o, "\n", 1);
    if (o.failed) {
        gd_json_out_free(&o);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", path);
    }
    gd_atomic_file af;
    st = gd_atomic_open(ctx, path, &af);
    if (st == GD_OK) st = gd_atomic_write(ctx, &af, o.buf, o.len, "the config");
    if (st == GD_OK) st = gd_atomic_commit(ctx, &af);
    else gd_atomic_abort(&af);
    gd_json_out_free(&o);
    return st;
}
