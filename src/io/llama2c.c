/* llama2c.c — llama2.c checkpoints (see llama2c.h).
 *
 * Legacy header: int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 * (vocab_size negative when the output matrix is stored apart from the embedding). Then
 * f32: token embedding (V, D); attention norms (L, D); wq (L, D, D); wk, wv (L, KV, D);
 * wo (L, D, D); ffn norms (L, D); w1 (L, F, D); w2 (L, D, F); w3 (L, F, D); final norm (D);
 * the RoPE table, cos and sin (seq_len, hd / 2) each; the output (V, D) when apart.
 * Versioned header (version 1): uint32 0x616b3432, int32 1, the seven ints (vocab_size
 * positive), a byte saying whether the output is shared, zeros to 256 bytes. Then f32:
 * attention norms, ffn norms, final norm, embedding, wq, wk, wv, wo, w1, w2, w3, and the
 * output when apart. Matrices are (out, in) row-major, as Hugging Face's; w1, w3 and w2
 * are the gate, up and down projections. Version 2 (int8 groups) is refused by name.
 *
 * Every size is checked against the file before anything is read: the dims positive and
 * consistent (D = heads x hd, hd even, heads a multiple of kv heads), the byte count of
 * the weights computed without overflow and equal to what follows the header. */
#define _DEFAULT_SOURCE 1
#include "llama2c.h"
#include "hf_weights.h"

#include "alloc.h"
#include "checked.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define L2C_MAGIC 0x616b3432u
#define L2C_V1_HEADER 256

enum { W_EMB, W_ATT_NORM, W_WQ, W_WK, W_WV, W_WO, W_FFN_NORM, W_W1, W_W2, W_W3, W_NORM, W_CLS, W_N };

struct gd_l2c {
    char name[512];
    const unsigned char *base;
    size_t size;
    int mapped;
    int64_t D, F, L, H, KV, V, T, hd;
    int shared;
    size_t off[W_N];  /* byte offset of each weight group; per layer groups hold L blocks */
    size_t block[W_N]; /* floats per layer (or in all, for whole tensors) */
};

/* checked.h's arithmetic as truth values: 1 when the result fits */
static int mul_ok(int64_t a, int64_t b, int64_t *o) { return gd_mul_i64(a, b, o) == 0; }
static int mulz_ok(size_t a, size_t b, size_t *o) { return gd_mul_size(a, b, o) == 0; }
static int addz_ok(size_t a, size_t b, size_t *o) { return gd_add_size(a, b, o) == 0; }

static int32_t rd_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

int gd_l2c_sniff(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return 0;
    unsigned char h[28];
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    if (n < 28) return 0;
    if ((uint32_t)rd_i32(h) == L2C_MAGIC) return 1;
    for (int i = 0; i < 7; i++) /* the legacy header: plausible positive dims */
        if ((i == 5 ? (rd_i32(h + 4 * i) == 0) : rd_i32(h + 4 * i) <= 0)) return 0;
    return 1;
}

static gd_status bad(gd_ctx *ctx, const char *name, const char *what)
{
    return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: %s", name, what);
}

gd_status gd_l2c_parse(gd_ctx *ctx, const char *name, const void *data, size_t n, gd_l2c **out, gd_lm_config *cfg)
{
    *out = NULL;
    const unsigned char *p = data;
    if (n < 28) return bad(ctx, name, "too short for a llama2.c header (28 bytes)");
    int v1 = (uint32_t)rd_i32(p) == L2C_MAGIC;
    size_t hdr = 28;
    const unsigned char *h = p;
    if (v1) {
        if (n < L2C_V1_HEADER) return bad(ctx, name, "too short for a versioned llama2.c header (256 bytes)");
        int32_t version = rd_i32(p + 4);
        if (version != 1) {
            char m[96];
            snprintf(m, sizeof m, "llama2.c format version %d is not supported (version 1 is: f32 weights)", (int)version);
            return bad(ctx, name, m);
        }
        h = p + 8;
        hdr = L2C_V1_HEADER;
    }
    int32_t dims[7];
    for (int i = 0; i < 7; i++) dims[i] = rd_i32(h + 4 * i);
    gd_l2c *m = gd_calloc(1, sizeof *m);
    if (m == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", name);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->D = dims[0], m->F = dims[1], m->L = dims[2], m->H = dims[3], m->KV = dims[4], m->T = dims[6];
    m->V = dims[5] < 0 ? -(int64_t)dims[5] : dims[5];
    m->shared = v1 ? p[8 + 28] != 0 : dims[5] > 0;
    char why[200] = "";
    if (m->D <= 0 || m->F <= 0 || m->L <= 0 || m->H <= 0 || m->KV <= 0 || m->V <= 0 || m->T <= 0)
        snprintf(why, sizeof why, "header dims must be positive (dim %d, hidden %d, layers %d, heads %d, kv heads %d, "
                 "vocab %d, seq %d)", dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6]);
    else if (m->D % m->H != 0 || (m->D / m->H) % 2 != 0)
        snprintf(why, sizeof why, "dim %lld is not heads %lld times an even head size", (long long)m->D, (long long)m->H);
    else if (m->H % m->KV != 0)
        snprintf(why, sizeof why, "heads %lld are not a multiple of kv heads %lld", (long long)m->H, (long long)m->KV);
    if (why[0]) {
        gd_free(m);
        return bad(ctx, name, why);
    }
    m->hd = m->D / m->H;
    static const int legacy[] = {W_EMB, W_ATT_NORM, W_WQ, W_WK, W_WV, W_WO, W_FFN_NORM, W_W1, W_W2, W_W3, W_NORM};
    static const int v1order[] = {W_ATT_NORM, W_FFN_NORM, W_NORM, W_EMB, W_WQ, W_WK, W_WV, W_WO, W_W1, W_W2, W_W3};
    size_t at = hdr;
    int ok = 1;
    for (int i = 0; i < 11 && ok; i++) {
        int w = v1 ? v1order[i] : legacy[i];
        int64_t per = 0, count = 0;
        size_t bytes = 0;
        switch (w) {
        case W_EMB: ok = mul_ok(m->V, m->D, &per); break;
        case W_ATT_NORM: case W_FFN_NORM: case W_NORM: per = m->D; break;
        case W_WQ: case W_WO: ok = mul_ok(m->D, m->D, &per); break;
        case W_WK: case W_WV: ok = mul_ok(m->KV * m->hd, m->D, &per); break;
        default: ok = mul_ok(m->F, m->D, &per); break;
        }
        count = per;
        if (ok && w != W_EMB && w != W_NORM) ok = mul_ok(per, m->L, &count);
        m->off[w] = at;
        m->block[w] = (size_t)per;
        ok = ok && mulz_ok((size_t)count, 4, &bytes) && addz_ok(at, bytes, &at);
    }
    if (ok && !v1) { /* the RoPE table, not used: gradus computes the rotation */
        int64_t table = 0;
        size_t bytes = 0;
        ok = mul_ok(m->T, m->hd, &table) && mulz_ok((size_t)table, 4, &bytes) && addz_ok(at, bytes, &at);
    }
    if (ok && !m->shared) {
        int64_t per = 0;
        size_t bytes = 0;
        m->off[W_CLS] = at;
        ok = mul_ok(m->V, m->D, &per) && mulz_ok((size_t)per, 4, &bytes) && addz_ok(at, bytes, &at);
        m->block[W_CLS] = (size_t)per;
    }
    if (!ok || at != n) {
        char msg[300];
        if (ok)
            snprintf(msg, sizeof msg, "%s llama2.c checkpoint of dim %lld, %lld layers, vocab %lld is %zu bytes; the file "
                     "has %zu (truncated, or another format)", v1 ? "a version 1" : "a legacy", (long long)m->D,
                     (long long)m->L, (long long)m->V, at, n);
        else
            snprintf(msg, sizeof msg, "the header's dims (dim %lld, %lld layers, vocab %lld) overflow any file size",
                     (long long)m->D, (long long)m->L, (long long)m->V);
        gd_free(m);
        return bad(ctx, name, msg);
    }
    m->base = p;
    m->size = n;
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = GD_LM_LLAMA;
    cfg->dim = m->D, cfg->hidden_dim = m->F, cfg->n_layers = m->L, cfg->n_heads = m->H, cfg->n_kv_heads = m->KV;
    cfg->vocab_size = m->V, cfg->max_seq = m->T, cfg->rope_theta = 1e4, cfg->norm_eps = 1e-5;
    cfg->tied_embeddings = m->shared;
    gd_status s = gd_lm_config_check(ctx, cfg);
    if (s != GD_OK) {
        gd_free(m);
        return s;
    }
    *out = m;
    return GD_OK;
}

gd_status gd_l2c_open(gd_ctx *ctx, const char *path, gd_l2c **out, gd_lm_config *cfg)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 28) {
        close(fd);
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: not a llama2.c checkpoint (a file of at least 28 bytes)", path);
    }
    size_t n = (size_t)sb.st_size;
    void *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    gd_status s = gd_l2c_parse(ctx, path, map, n, out, cfg);
    if (s != GD_OK) {
        munmap(map, n);
        return s;
    }
    (*out)->mapped = 1;
    return GD_OK;
}

void gd_l2c_close(gd_l2c *m)
{
    if (m == NULL) return;
    if (m->mapped) munmap((void *)m->base, m->size);
    gd_free(m);
}

/* Which weight group and layer a Hugging Face name is; -1 if none. */
static int which(const gd_l2c *m, const char *name, int64_t *layer)
{
    static const struct {
        const char *suffix;
        int w;
    } per_layer[] = {{"input_layernorm.weight", W_ATT_NORM}, {"post_attention_layernorm.weight", W_FFN_NORM},
                     {"self_attn.q_proj.weight", W_WQ},     {"self_attn.k_proj.weight", W_WK},
                     {"self_attn.v_proj.weight", W_WV},     {"self_attn.o_proj.weight", W_WO},
                     {"mlp.gate_proj.weight", W_W1},        {"mlp.down_proj.weight", W_W2},
                     {"mlp.up_proj.weight", W_W3}};
    *layer = 0;
    if (strcmp(name, "model.embed_tokens.weight") == 0) return W_EMB;
    if (strcmp(name, "model.norm.weight") == 0) return W_NORM;
    if (strcmp(name, "lm_head.weight") == 0) return m->shared ? W_EMB : W_CLS;
    long long l;
    int used = 0;
    if (sscanf(name, "model.layers.%lld.%n", &l, &used) != 1 || used == 0 || l < 0 || l >= m->L) return -1;
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
        if (strcmp(name + used, per_layer[i].suffix) == 0) {
            *layer = l;
            return per_layer[i].w;
        }
    return -1;
}

gd_status gd_l2c_load(gd_ctx *ctx, const gd_l2c *m, const char *name, gd_tensor *t)
{
    int64_t layer;
    int w = which(m, name, &layer);
    if (w < 0) return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: a llama2.c checkpoint has no tensor %s", m->name, name);
    size_t n = m->block[w];
    gd_dtype tdt = gd_tensor_dtype(t);
    if ((tdt != GD_F32 && tdt != GD_BF16 && tdt != GD_F16 && tdt != GD_I8) || (size_t)gd_tensor_numel(t) != n) {
        char d[128];
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: tensor %s has %zu values, the model wants %s", m->name, name, n,
                           gd_tensor_describe(t, d, sizeof d));
    }
    const unsigned char *src = m->base + m->off[w] + (size_t)layer * n * 4;
    float *v = gd_malloc(sizeof *v * (n > 0 ? n : 1));
    if (v == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory for %s", m->name, name);
    if (w == W_WQ || w == W_WK) {
        /* rows of head h: llama2.c pairs (2i, 2i+1), Hugging Face pairs (i, i + hd/2) */
        int64_t heads = w == W_WQ ? m->H : m->KV, half = m->hd / 2, D = m->D;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < half; i++)
                for (int c = 0; c < 2; c++)
                    memcpy(v + (h * m->hd + c * half + i) * D, src + (size_t)((h * m->hd + 2 * i + c) * D) * 4,
                           (size_t)D * 4);
    } else {
        memcpy(v, src, n * 4);
    }
    gd_status s = gd_weights_write(ctx, t, GD_F32, v, n * 4);
    gd_free(v);
    return s;
}
