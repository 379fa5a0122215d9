/* lm_model.c — the llama and GPT-2 families as graphs of gradus ops.
 *
 * Parameters take the names and layouts Hugging Face gives them, so that a checkpoint
 * written from the graph is a model directory `transformers` loads, and one it wrote
 * loads here:
 *   llama: model.embed_tokens.weight (V, D); per layer model.layers.L.
 *          {input_layernorm, post_attention_layernorm}.weight (D),
 *          self_attn.{q,k,v,o}_proj.weight (out, in), [self_attn.{q,k,v}_proj.bias (Qwen2)],
 *          [self_attn.{q,k}_norm.weight (hd)],
 *          mlp.{gate,up,down}_proj.weight (out, in); model.norm.weight; lm_head.weight
 *          unless the embeddings are tied.
 *   GPT-2: transformer.wte.weight (Vp, D), transformer.wpe.weight (P, D); per layer
 *          transformer.h.L.{ln_1,ln_2}.{weight,bias}, attn.c_attn.{weight (D, 3D), bias},
 *          attn.c_proj, mlp.c_fc (D, F), mlp.c_proj (F, D) — Conv1D weights are stored
 *          (in, out), which `linear_act` reads with weight_in_out = 1; transformer.ln_f.
 * Initial values follow the Hugging Face classes: normal(0, 0.02) for projections and
 * embeddings (GPT-2's residual projections scaled by 1/sqrt(2 layers)), ones for norm
 * weights, zeros for biases.
 *
 * Shapes: x (B, T, D); heads are split as (B, T, H, hd), which RoPE takes, and viewed as
 * (B, H, T, hd) for attention; the transposes are views, so no copy is made unless a
 * kernel needs one.
 */
#include "gradus_lm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* For training, parameters are f32 (master weights); with a narrower compute dtype each is
 * cast where it is used, and activations flow in that dtype, as autocast does: gradients
 * come back through the casts to the f32 parameters the optimizer updates. For inference
 * (a KV cache) there is nothing to update, so parameters are made in the compute dtype:
 * the weights are read once per token at their narrow width, with no cast. */
typedef struct builder {
    gd_graph *g;
    const gd_lm_config *cfg;
    gd_dtype dt;     /* activations */
    gd_dtype pdt;    /* parameters */
    int quant;       /* projections over int8 weights: GD_LM_INT8 or GD_LM_W8A8 (inference only) */
    int failed;
    /* KV cache (gd_lm_forward_cached): keys and values of every layer stay in states
     * "cache.<layer>.k/v" of cache_len positions, written at pos; attention reads the
     * first kv_len of them. cache_len 0: no cache. */
    gd_tensor *pos, *kv_len;
    int64_t cache_len;
} builder;

static gd_tensor *use(builder *b, gd_tensor *p)
{
    return p == NULL || gd_tensor_dtype(p) == b->dt ? p : gd_cast(p, b->dt);
}

static gd_tensor *fail(builder *b, gd_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static gd_tensor *fail(builder *b, gd_status s, const char *fmt, ...)
{
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    gd_ctx_fail(gd_graph_ctx(b->g), s, "%s", m);
    b->failed = 1;
    return NULL;
}

/* A parameter "<prefix>.<what>" of the given shape and initializer. */
static gd_tensor *param(builder *b, const char *prefix, const char *what, int ndim, const int64_t *shape, gd_init init,
                        double std)
{
    if (b->failed) return NULL;
    char name[256];
    int n = prefix[0] ? snprintf(name, sizeof name, "%s.%s", prefix, what) : snprintf(name, sizeof name, "%s", what);
    if (n < 0 || (size_t)n >= sizeof name) return fail(b, GD_ERR_INVALID, "parameter name %s.%s is too long", prefix, what);
    /* a second forward pass over the same graph (the inference engine's prefill and
     * decode programs) shares the first one's parameters */
    gd_tensor *p = gd_graph_find(b->g, name);
    if (p != NULL) {
        int same = gd_tensor_ndim(p) == ndim && gd_tensor_dtype(p) == b->pdt;
        for (int k = 0; same && k < ndim; k++) same = gd_tensor_dim(p, k) == shape[k];
        if (!same) return fail(b, GD_ERR_SHAPE, "parameter %s exists with another shape", name);
        return p;
    }
    p = gd_param(b->g, name, b->pdt, ndim, shape);
    if (p == NULL || gd_param_set_init(p, init, std) != GD_OK) {
        b->failed = 1;
        return NULL;
    }
    return p;
}

/* norm weights and biases, used in the compute dtype */
static gd_tensor *vec(builder *b, const char *prefix, const char *what, int64_t n, gd_init init)
{
    return use(b, param(b, prefix, what, 1, (int64_t[]){n}, init, 0));
}
static gd_tensor *mat(builder *b, const char *prefix, const char *what, int64_t rows, int64_t cols, double std)
{
    return param(b, prefix, what, 2, (int64_t[]){rows, cols}, GD_INIT_NORMAL, std);
}

/* x (..., in) @ W^T + bias (may be NULL) with W "<prefix>.<what>" (out, in): a Hugging
 * Face nn.Linear. Quantized, W is an i8 parameter of that name beside its per-row scales,
 * the state "<name>.q8_scale", which the loaders fill together from the float weights. */
static gd_tensor *dense(builder *b, gd_tensor *x, const char *prefix, const char *what, int64_t out, int64_t in,
                        double std, gd_tensor *bias)
{
    if (!b->quant) return gd_linear(x, use(b, mat(b, prefix, what, out, in, std)), bias);
    if (b->failed) return NULL;
    char name[256], sname[300];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    snprintf(sname, sizeof sname, "%s.q8_scale", name);
    gd_tensor *wq = gd_graph_find(b->g, name), *sc = gd_graph_find(b->g, sname);
    if (wq == NULL) wq = gd_param(b->g, name, GD_I8, 2, (int64_t[]){out, in});
    if (sc == NULL) sc = gd_state(b->g, sname, GD_F32, 1, (int64_t[]){out});
    if (wq == NULL || sc == NULL) {
        b->failed = 1;
        return NULL;
    }
    return gd_linear_q8(x, wq, sc, bias, b->quant == GD_LM_W8A8);
}

/* x (..., in) @ W^T with W (out, in) */
static gd_tensor *proj(builder *b, gd_tensor *x, const char *prefix, const char *what, int64_t out, int64_t in,
                       double std)
{
    char l[256]; /* the module's name ("model.layers.0.mlp.up_proj") for traces and errors */
    snprintf(l, sizeof l, "%s.%.*s", prefix, (int)(strlen(what) - strlen(".weight")), what);
    return gd_label(dense(b, x, prefix, what, out, in, std, NULL), l);
}

/* q, k or v projection of a llama-family layer: with biases in Qwen2 (attn_bias). */
static gd_tensor *qkv(builder *b, gd_tensor *x, const char *prefix, const char *what, int64_t out, int64_t in)
{
    char name[96];
    snprintf(name, sizeof name, "%s.weight", what);
    gd_tensor *bias = NULL;
    if (b->cfg->attn_bias) {
        char bname[96];
        snprintf(bname, sizeof bname, "%s.bias", what);
        if ((bias = vec(b, prefix, bname, out, GD_INIT_ZEROS)) == NULL) return NULL;
    }
    gd_tensor *y = dense(b, x, prefix, name, out, in, 0.02, bias);
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    return gd_label(y, name);
}

/* x (..., in) @ W + bias with W (in, out): GPT-2's Conv1D. */
static gd_tensor *conv1d(builder *b, gd_tensor *x, const char *prefix, int64_t in, int64_t out, double std)
{
    if (b->quant) {
        /* int8: the weights (out, in) like any projection's; the scale state's name tells
         * the loader that the file holds them (in, out), to be transposed as quantized */
        gd_tensor *bias = vec(b, prefix, "bias", out, GD_INIT_ZEROS);
        if (b->failed || x == NULL || bias == NULL) return NULL;
        char name[256], sname[300];
        snprintf(name, sizeof name, "%s.weight", prefix);
        snprintf(sname, sizeof sname, "%s.q8_scale_in_out", name);
        gd_tensor *wq = gd_graph_find(b->g, name), *sc = gd_graph_find(b->g, sname);
        if (wq == NULL) wq = gd_param(b->g, name, GD_I8, 2, (int64_t[]){out, in});
        if (sc == NULL) sc = gd_state(b->g, sname, GD_F32, 1, (int64_t[]){out});
        if (wq == NULL || sc == NULL) {
            b->failed = 1;
            return NULL;
        }
        return gd_label(gd_linear_q8(x, wq, sc, bias, b->quant == GD_LM_W8A8), prefix);
    }
    gd_tensor *w = use(b, mat(b, prefix, "weight", in, out, std)), *bias = vec(b, prefix, "bias", out, GD_INIT_ZEROS);
    if (x == NULL || w == NULL || bias == NULL) return NULL;
    gd_attr a[2] = {gd_attr_i("act", 0), gd_attr_i("weight_in_out", 1)};
    return gd_label(gd_op(b->g, "linear_act", 3, (gd_tensor *[]){x, w, bias}, 2, a), prefix);
}

/* (B, T, n*hd) -> (B, n, T, hd), a view */
static gd_tensor *heads(gd_tensor *x, int64_t B, int64_t T, int64_t n, int64_t hd)
{
    return gd_reshape(x, 4, (int64_t[]){B, T, n, hd});
}

/* A layer's key or value cache, (B, Hkv, cache_len, hd) in the compute dtype, x (B, T,
 * Hkv, hd) written into it at pos: the cache as attention reads it. */
static gd_tensor *cached(builder *b, gd_tensor *x, int64_t layer, const char *which)
{
    char name[64];
    snprintf(name, sizeof name, "cache.%lld.%s", (long long)layer, which);
    gd_tensor *t = gd_transpose(x, 1, 2);
    if (t == NULL) return NULL;
    int64_t shape[4] = {gd_tensor_dim(t, 0), gd_tensor_dim(t, 1), b->cache_len, gd_tensor_dim(t, 3)};
    gd_tensor *c = gd_graph_find(b->g, name);
    if (c == NULL) c = gd_state(b->g, name, b->dt, 4, shape);
    return c != NULL ? gd_cache_write(c, t, b->pos) : NULL;
}

/* attention over (B, T, H, hd) q and (B, T, Hkv, hd) k, v (through the layer's KV cache
 * when there is one); returns (B, T, H*hd). The attention node is labelled
 * "<prefix>.attention". */
static gd_tensor *attend(builder *b, gd_tensor *q, gd_tensor *k, gd_tensor *v, int64_t layer, int64_t H, int64_t hd,
                         const char *prefix)
{
    char l[256];
    snprintf(l, sizeof l, "%s.attention", prefix);
    int64_t B = gd_tensor_dim(q, 0), T = gd_tensor_dim(q, 1);
    gd_tensor *kk = b->cache_len > 0 ? cached(b, k, layer, "k") : gd_transpose(k, 1, 2);
    gd_tensor *vv = b->cache_len > 0 ? cached(b, v, layer, "v") : gd_transpose(v, 1, 2);
    /* q's transpose after the cache writes: a graph pass may put the RoPE of q and k and
     * both writes in one node, which takes the last write's place in program order */
    gd_tensor *qt = gd_transpose(q, 1, 2);
    gd_tensor *y = gd_label(gd_attention(qt, kk, vv, 1, 0.0, b->kv_len), l);
    return gd_reshape(gd_transpose(y, 1, 2), 3, (int64_t[]){B, T, H * hd});
}

/* The positions pos .. pos + T - 1 as i32: (T) for a scalar pos (or none), (B, T) for one
 * per sequence (B) — a decoder's batch whose sequences stand at different lengths. */
static gd_tensor *positions(builder *b, int64_t T, gd_tensor *pos)
{
    gd_tensor *at = gd_arange(b->g, GD_I32, T, 0, 1);
    if (pos == NULL) return at;
    gd_tensor *p = gd_tensor_dtype(pos) == GD_I32 ? pos : gd_cast(pos, GD_I32);
    if (gd_tensor_ndim(pos) != 1) return gd_add(at, p);
    int64_t B = gd_tensor_dim(pos, 0);
    return gd_add(gd_reshape(at, 2, (int64_t[]){1, T}), gd_reshape(p, 2, (int64_t[]){B, 1}));
}

/* The cos and sin of Llama 3's scaled RoPE angles, states "rope.cos" and "rope.sin" of
 * (max_seq, hd): row p holds the angles p * f_i for the scaled frequencies f_i, twice over
 * (Hugging Face's cat(freqs, freqs)), computed once in double when the model is built. */
static gd_status rope_tables(builder *b, gd_tensor **cos_t, gd_tensor **sin_t)
{
    const gd_lm_config *c = b->cfg;
    *cos_t = gd_graph_find(b->g, "rope.cos"), *sin_t = gd_graph_find(b->g, "rope.sin");
    if (*cos_t != NULL && *sin_t != NULL) return GD_OK;
    int64_t hd = c->head_dim, half = hd / 2, P = c->max_seq;
    *cos_t = gd_state(b->g, "rope.cos", GD_F32, 2, (int64_t[]){P, hd});
    *sin_t = gd_state(b->g, "rope.sin", GD_F32, 2, (int64_t[]){P, hd});
    float *cv = malloc(sizeof *cv * (size_t)(P * hd)), *sv = malloc(sizeof *sv * (size_t)(P * hd));
    double *f = malloc(sizeof *f * (size_t)half);
    gd_status st = *cos_t == NULL || *sin_t == NULL ? GD_ERR_INVALID : GD_OK;
    if (st == GD_OK && (cv == NULL || sv == NULL || f == NULL)) st = GD_ERR_NOMEM;
    const double pi = 3.14159265358979323846, orig = (double)c->rope_original_max;
    const double low_wavelen = orig / c->rope_low_freq_factor, high_wavelen = orig / c->rope_high_freq_factor;
    for (int64_t i = 0; st == GD_OK && i < half; i++) {
        double freq = pow(c->rope_theta, -2.0 * (double)i / (double)hd), wavelen = 2 * pi / freq;
        if (wavelen < high_wavelen) f[i] = freq;
        else if (wavelen > low_wavelen) f[i] = freq / c->rope_factor;
        else {
            double smooth = (orig / wavelen - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
            f[i] = (1 - smooth) * freq / c->rope_factor + smooth * freq;
        }
    }
    for (int64_t p = 0; st == GD_OK && p < P; p++)
        for (int64_t i = 0; i < hd; i++) {
            double a = (double)p * f[i % half];
            cv[p * hd + i] = (float)cos(a);
            sv[p * hd + i] = (float)sin(a);
        }
    if (st == GD_OK) st = gd_tensor_write(*cos_t, cv, sizeof *cv * (size_t)(P * hd));
    if (st == GD_OK) st = gd_tensor_write(*sin_t, sv, sizeof *sv * (size_t)(P * hd));
    free(cv);
    free(sv);
    free(f);
    if (st == GD_ERR_NOMEM) gd_ctx_fail(gd_graph_ctx(b->g), st, "lm: out of memory for the RoPE tables");
    if (st != GD_OK) b->failed = 1;
    return st;
}

/* RoPE of x (B, T, heads, hd) at positions pos .. pos + T - 1 (Hugging Face's rotate_half
 * pairs): the fused op, or with Llama 3's scaling x cos + rotate_half(x) sin from the
 * tables, in ops every backend has. */
static gd_tensor *rotate(builder *b, gd_tensor *x, gd_tensor *pos)
{
    if (x == NULL) return NULL;
    if (!(b->cfg->rope_factor > 0)) return gd_rope(x, b->cfg->rope_theta, 0, pos);
    gd_tensor *ct, *st;
    if (rope_tables(b, &ct, &st) != GD_OK) return NULL;
    int64_t T = gd_tensor_dim(x, 1), hd = gd_tensor_dim(x, 3), half = hd / 2;
    gd_tensor *at = positions(b, T, pos);
    int64_t rows = gd_tensor_ndim(at) == 2 ? gd_tensor_dim(at, 0) : 1; /* a table row per sequence, or one */
    gd_tensor *c = use(b, gd_reshape(gd_embedding(ct, at), 4, (int64_t[]){rows, T, 1, hd}));
    gd_tensor *s = use(b, gd_reshape(gd_embedding(st, at), 4, (int64_t[]){rows, T, 1, hd}));
    gd_tensor *parts[2] = {gd_neg(gd_slice(x, 3, half, hd)), gd_slice(x, 3, 0, half)};
    gd_tensor *rot = gd_concat(b->g, 2, parts, 3);
    return gd_add(gd_mul(x, c), gd_mul(rot, s));
}

static gd_tensor *llama(builder *b, gd_tensor *ids, gd_tensor *pos)
{
    const gd_lm_config *c = b->cfg;
    int64_t B = gd_tensor_dim(ids, 0), T = gd_tensor_dim(ids, 1), D = c->dim, H = c->n_heads, Hkv = c->n_kv_heads;
    int64_t hd = c->head_dim, F = c->hidden_dim, V = c->vocab_padded;
    double eps = c->norm_eps, std = 0.02;
    gd_tensor *emb = mat(b, "model", "embed_tokens.weight", V, D, std);
    gd_tensor *x = use(b, gd_embedding(emb, ids)); // (B, T, D), gathered in f32 and cast
    for (int64_t l = 0; l < c->n_layers && !b->failed; l++) {
        char L[64], A[80], M[80];
        snprintf(L, sizeof L, "model.layers.%lld", (long long)l);
        snprintf(A, sizeof A, "%s.self_attn", L);
        snprintf(M, sizeof M, "%s.mlp", L);
        gd_tensor *h = gd_rms_norm(x, vec(b, L, "input_layernorm.weight", D, GD_INIT_ONES), eps);
        /* the three products before any of their reshapes, so that a graph pass may put
         * them in one node (it takes the last one's place in program order) */
        gd_tensor *q = qkv(b, h, A, "q_proj", H * hd, D);
        gd_tensor *k = qkv(b, h, A, "k_proj", Hkv * hd, D);
        gd_tensor *v = qkv(b, h, A, "v_proj", Hkv * hd, D);
        q = heads(q, B, T, H, hd), k = heads(k, B, T, Hkv, hd), v = heads(v, B, T, Hkv, hd);
        if (c->qk_norm) {
            q = gd_rms_norm(q, vec(b, A, "q_norm.weight", hd, GD_INIT_ONES), eps);
            k = gd_rms_norm(k, vec(b, A, "k_norm.weight", hd, GD_INIT_ONES), eps);
        }
        q = rotate(b, q, pos); /* the half-split pairs of Hugging Face's rotate_half */
        k = rotate(b, k, pos);
        gd_tensor *att = attend(b, q, k, v, l, H, hd, A);
        x = gd_add(x, proj(b, att, A, "o_proj.weight", D, H * hd, std));
        h = gd_rms_norm(x, vec(b, L, "post_attention_layernorm.weight", D, GD_INIT_ONES), eps);
        gd_tensor *gate = proj(b, h, M, "gate_proj.weight", F, D, std);
        gd_tensor *up = proj(b, h, M, "up_proj.weight", F, D, std);
        x = gd_add(x, proj(b, gd_swiglu(gate, up), M, "down_proj.weight", D, F, std));
        if (x == NULL && !b->failed) b->failed = 1;
    }
    gd_tensor *h = gd_rms_norm(x, vec(b, "model", "norm.weight", D, GD_INIT_ONES), eps);
    /* quantized, the output head is int8 too, under lm_head.weight even when tied (the
     * loader fills it from the embedding): decoding reads the head whole every token, the
     * embedding only a row */
    if (b->quant) return gd_label(dense(b, h, "lm_head", "weight", V, D, std, NULL), "lm_head");
    gd_tensor *w = c->tied_embeddings ? emb : mat(b, "", "lm_head.weight", V, D, std);
    return gd_label(gd_linear(h, use(b, w), NULL), "lm_head"); // (B, T, V)
}

static gd_tensor *gpt2(builder *b, gd_tensor *ids, gd_tensor *pos)
{
    const gd_lm_config *c = b->cfg;
    int64_t B = gd_tensor_dim(ids, 0), T = gd_tensor_dim(ids, 1), D = c->dim, H = c->n_heads, hd = c->head_dim;
    int64_t F = c->hidden_dim, V = c->vocab_padded;
    double eps = c->norm_eps, std = 0.02, proj_std = 0.02 / sqrt(2.0 * (double)c->n_layers);
    gd_tensor *wte = mat(b, "transformer", "wte.weight", V, D, std);
    gd_tensor *wpe = mat(b, "transformer", "wpe.weight", c->max_seq, D, std);
    if (T > c->max_seq)
        return fail(b, GD_ERR_SHAPE, "gpt2: sequences of %lld tokens, but the model has %lld positions", (long long)T,
                    (long long)c->max_seq);
    /* positions pos .. pos + T - 1; one past the table is bad data the embedding reports */
    gd_tensor *x = use(b, gd_add(gd_embedding(wte, ids), gd_embedding(wpe, positions(b, T, pos)))); // + (T | B, T, D)
    for (int64_t l = 0; l < c->n_layers && !b->failed; l++) {
        char L[64], P[96];
        snprintf(L, sizeof L, "transformer.h.%lld", (long long)l);
        snprintf(P, sizeof P, "%s.ln_1", L);
        gd_tensor *h = gd_layer_norm(x, vec(b, P, "weight", D, GD_INIT_ONES), vec(b, P, "bias", D, GD_INIT_ZEROS), eps);
        snprintf(P, sizeof P, "%s.attn.c_attn", L);
        gd_tensor *qkv = conv1d(b, h, P, D, 3 * D, std), *part[3] = {NULL, NULL, NULL};
        if (gd_split(qkv, -1, 3, NULL, part) != GD_OK && !b->failed) b->failed = 1;
        snprintf(P, sizeof P, "%s.attn", L);
        gd_tensor *att = attend(b, heads(part[0], B, T, H, hd), heads(part[1], B, T, H, hd),
                                heads(part[2], B, T, H, hd), l, H, hd, P);
        snprintf(P, sizeof P, "%s.attn.c_proj", L);
        x = gd_add(x, conv1d(b, att, P, D, D, proj_std));
        snprintf(P, sizeof P, "%s.ln_2", L);
        h = gd_layer_norm(x, vec(b, P, "weight", D, GD_INIT_ONES), vec(b, P, "bias", D, GD_INIT_ZEROS), eps);
        snprintf(P, sizeof P, "%s.mlp.c_fc", L);
        gd_tensor *m = gd_gelu(conv1d(b, h, P, D, F, std), 1);
        snprintf(P, sizeof P, "%s.mlp.c_proj", L);
        x = gd_add(x, conv1d(b, m, P, F, D, proj_std));
        if (x == NULL && !b->failed) b->failed = 1;
    }
    gd_tensor *h = gd_layer_norm(x, vec(b, "transformer.ln_f", "weight", D, GD_INIT_ONES),
                                 vec(b, "transformer.ln_f", "bias", D, GD_INIT_ZEROS), eps);
    return gd_label(gd_linear(h, use(b, wte), NULL), "lm_head"); // tied: (B, T, Vp)
}

gd_tensor *gd_lm_forward(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos, gd_dtype dtype)
{
    return gd_lm_forward_quant(g, cfg, ids, pos, NULL, 0, dtype, GD_LM_FLOAT);
}

gd_tensor *gd_lm_forward_cached(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos,
                                gd_tensor *kv_len, int64_t cache_len, gd_dtype dtype)
{
    return gd_lm_forward_quant(g, cfg, ids, pos, kv_len, cache_len, dtype, GD_LM_FLOAT);
}

/* The output head's logits (B, T, vocab_padded): the model up to its last product. */
static gd_tensor *head_logits(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos, gd_tensor *kv_len,
                              int64_t cache_len, gd_dtype dtype, gd_lm_quant quant)
{
    if (g == NULL || ids == NULL) return NULL;
    if (cache_len > 0 && (pos == NULL || kv_len == NULL)) {
        gd_ctx_fail(gd_graph_ctx(g), GD_ERR_INVALID, "lm: a KV cache needs the position and kv_len scalars");
        return NULL;
    }
    gd_ctx *ctx = gd_graph_ctx(g);
    if (cfg == NULL) {
        gd_ctx_fail(ctx, GD_ERR_INVALID, "lm: the config is NULL");
        return NULL;
    }
    char d[96];
    if (gd_tensor_ndim(ids) != 2 || (gd_tensor_dtype(ids) != GD_I32 && gd_tensor_dtype(ids) != GD_I64)) {
        gd_ctx_fail(ctx, GD_ERR_SHAPE, "lm: ids %s must be (B, T) of i32 or i64", gd_tensor_describe(ids, d, sizeof d));
        return NULL;
    }
    if (dtype != GD_F32 && dtype != GD_BF16 && dtype != GD_F16) {
        gd_ctx_fail(ctx, GD_ERR_INVALID, "lm: compute dtype %s; f32, bf16 or f16", gd_dtype_name(dtype));
        return NULL;
    }
    if (cfg->head_dim <= 0 || cfg->n_kv_heads <= 0 || cfg->vocab_padded < cfg->vocab_size) {
        gd_ctx_fail(ctx, GD_ERR_INVALID, "lm: the config has not been checked (gd_lm_config_check fills its defaults)");
        return NULL;
    }
    if (quant != GD_LM_FLOAT && quant != GD_LM_INT8 && quant != GD_LM_W8A8) {
        gd_ctx_fail(ctx, GD_ERR_INVALID, "lm: quantization %d; 0 none, 1 int8 weights, 2 w8a8", (int)quant);
        return NULL;
    }
    /* inference (a cache, or quantized weights) keeps its parameters in the compute dtype */
    int infer = cache_len > 0 || quant != GD_LM_FLOAT;
    builder b = {.g = g, .cfg = cfg, .dt = dtype, .pdt = infer ? dtype : GD_F32, .quant = quant, .pos = pos,
                 .kv_len = kv_len, .cache_len = cache_len};
    gd_tensor *logits = cfg->arch == GD_LM_GPT2 ? gpt2(&b, ids, pos) : llama(&b, ids, pos);
    return logits == NULL || b.failed ? NULL : logits;
}

gd_tensor *gd_lm_forward_quant(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos, gd_tensor *kv_len,
                               int64_t cache_len, gd_dtype dtype, gd_lm_quant quant)
{
    gd_tensor *logits = head_logits(g, cfg, ids, pos, kv_len, cache_len, dtype, quant);
    if (logits == NULL) return NULL;
    if (cfg->vocab_padded != cfg->vocab_size) logits = gd_slice(logits, -1, 0, cfg->vocab_size);
    return gd_label(logits, "logits");
}

/* The mean cross-entropy of logits (B, T, C) whose first `classes` columns are the
 * vocabulary (the rest padding, which takes no part), in f32: f16/bf16 logits are read as
 * they are (out_dtype), with no f32 copy of them or of their gradient. */
static gd_tensor *loss_of(gd_tensor *logits, gd_tensor *targets, int64_t classes)
{
    if (logits == NULL || targets == NULL) return NULL;
    int64_t B = gd_tensor_dim(logits, 0), T = gd_tensor_dim(logits, 1), C = gd_tensor_dim(logits, 2);
    gd_tensor *flat = gd_reshape(logits, 2, (int64_t[]){B * T, C});
    gd_tensor *in[2] = {flat, gd_reshape(targets, 1, (int64_t[]){B * T})};
    if (in[0] == NULL || in[1] == NULL) return NULL;
    const gd_dtype dt = gd_tensor_dtype(flat);
    gd_attr a[3];
    int na = 0;
    a[na++] = gd_attr_i("ignore_index", -1);
    if (classes < C) a[na++] = gd_attr_i("classes", classes);
    if (dt == GD_BF16 || dt == GD_F16) a[na++] = gd_attr_i("out_dtype", GD_F32);
    return gd_label(gd_op(gd_tensor_graph(logits), "cross_entropy", 2, in, na, a), "loss");
}

gd_tensor *gd_lm_loss(gd_tensor *logits, gd_tensor *targets)
{
    return loss_of(logits, targets, logits != NULL ? gd_tensor_dim(logits, 2) : 0);
}

gd_tensor *gd_lm_forward_loss(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *targets, gd_dtype dtype,
                              gd_lm_quant quant)
{
    /* the padded head's logits as they are: reading them through a slice would copy the
     * slice out for the loss and scatter its gradient back into a zeroed padded tensor */
    gd_tensor *logits = head_logits(g, cfg, ids, NULL, NULL, 0, dtype, quant);
    return loss_of(logits, targets, cfg != NULL ? cfg->vocab_size : 0);
}
