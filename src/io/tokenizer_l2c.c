/* tokenizer_l2c.c — llama2.c's tokenizer.bin: int32 max_token_length, then per id its f32
 * merge score, int32 byte length and bytes (SentencePiece pieces with "▁" already turned
 * into spaces). Ids 0, 1, 2 are <unk>, <s>, </s>; ids 3 to 258 the byte fallbacks <0x00>
 * to <0xFF> (checked: byte fallback encodes byte b as id b + 3).
 *
 * Encoding follows llama2.c's run.c: <s>, a space piece (the dummy prefix) when there is
 * text, each UTF-8 character's piece or else its bytes' fallback tokens, then repeatedly
 * the adjacent pair whose joined bytes are a piece of the highest score is merged into it,
 * until no pair is. Byte and control tokens never merge (in run.c their names, "<0x41>",
 * join nothing). Decoding gives each piece's bytes, a byte token its byte and a control
 * token nothing. */
#include "alloc.h"
#include "bpe.h"
#include "checked.h"

#include <stdio.h>
#include <string.h>

static int32_t rd_i32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* "<0xHH>": 1 and the byte */
static int byte_piece(const uint8_t *s, size_t n, uint8_t *b)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
    const char *hi = strchr(hex, s[3]), *lo = strchr(hex, s[4]);
    if (hi == NULL || lo == NULL || s[3] == 0 || s[4] == 0) return 0;
    *b = (uint8_t)((hi - hex) * 16 + (lo - hex));
    return 1;
}

gd_status gd_tokenizer_from_l2c(gd_ctx *ctx, const char *name, const uint8_t *data, size_t n, gd_tokenizer **out)
{
    *out = NULL;
    if (n < 4) return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: too short for llama2.c's tokenizer.bin", name);
    int32_t longest = rd_i32(data);
    if (longest <= 0 || longest > (1 << 16))
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: neither a tokenizer.json nor llama2.c's tokenizer.bin (its longest "
                                               "token would be %d bytes)", name, (int)longest);
    gd_tokenizer *t = gd_bpe_new();
    if (t == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", name);
    size_t at = 4, cap = 0;
    int32_t id = 0;
    char why[200];
    gd_status st = GD_OK;
    while (at < n && st == GD_OK) {
        if (n - at < 8) {
            st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: token %d is cut short at byte %zu", name, (int)id, at);
            break;
        }
        float score;
        memcpy(&score, data + at, 4);
        int32_t len = rd_i32(data + at + 4);
        at += 8;
        if (len < 0 || len > longest || (size_t)len > n - at) {
            st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: token %d claims %d bytes (the longest is %d; %zu are left)", name,
                             (int)id, (int)len, (int)longest, n - at);
            break;
        }
        if (id >= GD_BPE_MAX_ID) {
            st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: more than %d tokens", name, GD_BPE_MAX_ID);
            break;
        }
        if ((size_t)id >= cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            float *sc = gd_realloc(t->sp_score, ncap * sizeof *sc);
            if (sc == NULL) {
                st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", name);
                break;
            }
            t->sp_score = sc, cap = ncap;
        }
        t->sp_score[id] = score;
        const uint8_t *s = data + at;
        uint8_t b;
        if (id < 3) /* <unk>, <s>, </s>: control, decoded as nothing */
            st = gd_bpe_set_token(t, id, s, 0, GD_TOK_ADDED | GD_TOK_SPECIAL, why, sizeof why);
        else if (id < 259 && (!byte_piece(s, (size_t)len, &b) || b != id - 3)) /* encoding relies on it */
            st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: token %d is \"%.*s\", not the byte token <0x%02X>", name, (int)id,
                             len < 16 ? (int)len : 16, (const char *)s, (unsigned)(id - 3));
        else if (id < 259)
            st = gd_bpe_set_token(t, id, &b, 1, GD_TOK_ADDED | GD_TOK_SPECIAL, why, sizeof why);
        else
            st = gd_bpe_set_token(t, id, s, (size_t)len, GD_TOK_MODEL, why, sizeof why);
        if (st != GD_OK && st != GD_ERR_FORMAT)
            st = st == GD_ERR_NOMEM ? gd_ctx_fail(ctx, st, "%s: out of memory", name)
                                    : gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: token %d: %s", name, (int)id, why);
        at += (size_t)len;
        id++;
    }
    if (st == GD_OK && id < 259)
        st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: %d tokens; llama2.c's tokenizer has at least the 3 control and 256 "
                                             "byte tokens", name, (int)id);
    if (st != GD_OK) {
        gd_tokenizer_free(t);
        return st;
    }
    t->eos = 2;
    *out = t;
    return GD_OK;
}

static int mergeable(const gd_tokenizer *t, int32_t id) { return (t->flags[id] & GD_TOK_MODEL) != 0; }

gd_status gd_sp_encode(gd_ctx *ctx, const gd_tokenizer *t, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids)
{
    size_t cap;
    if (gd_add_size(n, 2, &cap) != 0 || gd_mul_size(cap, sizeof(int32_t), &cap) != 0)
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer encode: %zu bytes is too long", n);
    int32_t *out = gd_malloc(cap);
    uint8_t *join = gd_malloc(2 * (size_t)UINT16_MAX + 2);
    if (out == NULL || join == NULL) {
        gd_free(out);
        gd_free(join);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer encode: out of memory encoding %zu bytes", n);
    }
    size_t k = 0;
    out[k++] = 1; /* <s> */
    int32_t space = gd_bpe_lookup(t, (const uint8_t *)" ", 1);
    if (n > 0 && space >= 0) out[k++] = space;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && j - i < 4 && (text[j] & 0xC0) == 0x80) j++; /* one UTF-8 character */
        int32_t id = gd_bpe_lookup(t, text + i, j - i);
        if (id >= 0) out[k++] = id;
        else
            for (size_t b = i; b < j; b++) out[k++] = (int32_t)text[b] + 3; /* byte fallback */
        i = j;
    }
    for (;;) {
        float best = -1e10f;
        int32_t best_id = -1;
        size_t best_at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            if (!mergeable(t, out[i]) || !mergeable(t, out[i + 1])) continue;
            size_t la = t->len[out[i]], lb = t->len[out[i + 1]];
            memcpy(join, t->pool + t->off[out[i]], la);
            memcpy(join + la, t->pool + t->off[out[i + 1]], lb);
            int32_t id = gd_bpe_lookup(t, join, la + lb);
            if (id >= 0 && t->sp_score[id] > best) best = t->sp_score[id], best_id = id, best_at = i;
        }
        if (best_id < 0) break;
        out[best_at] = best_id;
        memmove(out + best_at + 1, out + best_at + 2, (k - best_at - 2) * sizeof *out);
        k--;
    }
    gd_free(join);
    *ids = out;
    *n_ids = k;
    return GD_OK;
}
