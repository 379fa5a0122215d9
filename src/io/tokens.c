/* tokens.c — token files: reading them and drawing batches (gradus_lm.h); the format is
 * in tokens.h, building one in tokens_build.c.
 *
 * Training windows are T+1 tokens starting every T tokens of the training split, so
 * that each token is a target once per epoch. An epoch visits them in an order that is
 * a permutation of the window indices computed from (seed, epoch), not stored: a
 * Feistel network on the next power of four, walked until it lands inside the range. So
 * a position (seed, epoch, index) is all a checkpoint needs to resume exactly. */
#include "tokens.h"

#include "alloc.h"
#include "checked.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct gd_token_data {
    gd_ctx *ctx; /* where batch errors go: the context it was opened with */
    char *name;
    void *map; /* the mapping, when opened from a file */
    size_t map_len;
    const uint8_t *tokens;
    int width;
    int32_t vocab, eos;
    int64_t n_tokens, n_docs;
    int64_t train_end, val_start; /* train [0, train_end), validation [val_start, n_tokens) */
};

uint64_t gd_toksum(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = w << 8 | p[i + (size_t)k];
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    return h;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static inline int32_t token_at(const gd_token_data *d, int64_t i)
{
    const uint8_t *p = d->tokens + (size_t)i * (size_t)d->width;
    return d->width == 2 ? (int32_t)(p[0] | p[1] << 8) : (int32_t)le32(p);
}

gd_status gd_token_data_from_memory(gd_ctx *ctx, const char *name, const uint8_t *data, size_t n, double val_fraction,
                                    gd_token_data **out)
{
    *out = NULL;
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the validation fraction %g is not in [0, 1)", name, val_fraction);
    if (n < GD_TOKFILE_HEADER || memcmp(data, GD_TOKFILE_MAGIC, 8) != 0)
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: not a gradus token file (%s)", name,
                           n < GD_TOKFILE_HEADER ? "shorter than its header" : "no GDTOKENS magic");
    if (gd_toksum(GD_TOKSUM_INIT, data, 56) != le64(data + 56))
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: the header is corrupt (checksum mismatch)", name);
    uint32_t version = le32(data + 8), width = le32(data + 12), vocab = le32(data + 16), eos = le32(data + 20);
    uint64_t nt = le64(data + 24), nd = le64(data + 32);
    if (version != GD_TOKFILE_VERSION)
        return gd_ctx_fail(ctx, GD_ERR_VERSION, "%s: token file version %u; this gradus reads version %d", name,
                           version, GD_TOKFILE_VERSION);
    if ((width != 2 && width != 4) || vocab == 0 || vocab > (width == 2 ? 65536u : 0x7FFFFFFFu) ||
        (eos != 0xFFFFFFFFu && eos >= vocab) || nt > (uint64_t)INT64_MAX || nd > (uint64_t)INT64_MAX)
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: the header is corrupt (token size %u, vocabulary %u, end id %u)",
                           name, width, vocab, eos);
    size_t tok_bytes, tok_area, table, need;
    if (gd_mul_size((size_t)nt, width, &tok_bytes) != 0 || gd_add_size(tok_bytes, 7, &tok_area) != 0 ||
        gd_add_size((size_t)nd, 1, &table) != 0 || gd_mul_size(table, 8, &table) != 0 ||
        gd_add_size((tok_area &= ~(size_t)7), table, &need) != 0 || gd_add_size(need, GD_TOKFILE_HEADER, &need) != 0)
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: the header's counts are impossible (%llu tokens, %llu documents)",
                           name, (unsigned long long)nt, (unsigned long long)nd);
    if (n != need)
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: %s: %zu bytes where the header says %zu (%llu tokens, %llu documents)",
                           name, n < need ? "truncated" : "trailing bytes", n, need, (unsigned long long)nt,
                           (unsigned long long)nd);
    const uint8_t *toks = data + GD_TOKFILE_HEADER, *tab = toks + tok_area;
    if (gd_toksum(GD_TOKSUM_INIT, tab, table) != le64(data + 48))
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: the document table is corrupt (checksum mismatch)", name);
    if (nd == 0 || nt == 0) return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: holds no tokens", name);
    uint64_t prev = 0;
    for (uint64_t i = 0; i <= nd; i++) {
        uint64_t o = le64(tab + 8 * i);
        if ((i == 0 && o != 0) || (i == nd && o != nt) || o < prev || o > nt || (i > 0 && o == prev))
            return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: the document table is corrupt at document %llu", name,
                               (unsigned long long)i);
        prev = o;
    }
    if (gd_toksum(GD_TOKSUM_INIT, toks, tok_area) != le64(data + 40))
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: the tokens are corrupt (checksum mismatch)", name);
    gd_token_data *d = gd_calloc(1, sizeof *d);
    if (d == NULL || (d->name = gd_strdup(name)) == NULL) {
        gd_free(d);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory", name);
    }
    d->ctx = ctx;
    d->tokens = toks;
    d->width = (int)width;
    d->vocab = (int32_t)vocab;
    d->eos = eos == 0xFFFFFFFFu ? -1 : (int32_t)eos;
    d->n_tokens = (int64_t)nt;
    d->n_docs = (int64_t)nd;
    for (int64_t i = 0; i < d->n_tokens; i++)
        if (token_at(d, i) < 0 || token_at(d, i) >= d->vocab) {
            gd_status st = gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: token %lld is %ld, outside the vocabulary of %ld", name,
                                       (long long)i, (long)token_at(d, i), (long)d->vocab);
            gd_token_data_close(d);
            return st;
        }
    /* the split: the last documents, or the last tokens of a corpus of one document */
    d->train_end = d->val_start = d->n_tokens;
    if (val_fraction > 0) {
        if (nd >= 2) {
            int64_t val_docs = (int64_t)llround((double)nd * val_fraction);
            if (val_docs < 1) val_docs = 1;
            if (val_docs > (int64_t)nd - 1) val_docs = (int64_t)nd - 1;
            d->train_end = d->val_start = (int64_t)le64(tab + 8 * (nd - (uint64_t)val_docs));
        } else {
            int64_t v = (int64_t)llround((double)nt * val_fraction);
            if (v < 1) v = 1;
            d->train_end = d->val_start = d->n_tokens - v;
        }
    }
    *out = d;
    return GD_OK;
}

gd_status gd_token_data_open(gd_ctx *ctx, const char *path, double val_fraction, gd_token_data **out)
{
    if (out != NULL) *out = NULL;
    if (path == NULL || out == NULL)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "token data open: %s is NULL", path == NULL ? "the path" : "the output");
    int fd = open(path, O_RDONLY);
    if (fd < 0) return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gd_ctx_fail(ctx, GD_ERR_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    if ((off_t)len != st.st_size) {
        close(fd);
        return gd_ctx_fail(ctx, GD_ERR_IO, "%s: too large to map", path);
    }
    if (len < GD_TOKFILE_HEADER) {
        close(fd);
        return gd_ctx_fail(ctx, GD_ERR_FORMAT, "%s: not a gradus token file (%zu bytes, shorter than its header)", path,
                           len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    gd_status s = gd_token_data_from_memory(ctx, path, map, len, val_fraction, out);
    if (s != GD_OK) {
        munmap(map, len);
        return s;
    }
    (*out)->map = map;
    (*out)->map_len = len;
    return GD_OK;
}

void gd_token_data_close(gd_token_data *d)
{
    if (d == NULL) return;
    if (d->map != NULL) munmap(d->map, d->map_len);
    gd_free(d->name);
    gd_free(d);
}

int64_t gd_token_data_tokens(const gd_token_data *d, int split)
{
    if (d == NULL) return 0;
    return split == GD_SPLIT_VAL ? d->n_tokens - d->val_start : d->train_end;
}

int32_t gd_token_data_vocab(const gd_token_data *d) { return d != NULL ? d->vocab : 0; }

/* ---- the order of windows --------------------------------------------------------------- */

static uint64_t splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The window visited `index`-th in epoch `epoch` of n windows. */
static uint64_t permute(uint64_t seed, int64_t epoch, uint64_t index, uint64_t n)
{
    if (n <= 1) return 0;
    int half = 1;
    while (half < 32 && (1ull << (2 * half)) < n) half++;
    uint64_t mask = (1ull << half) - 1, keys[4];
    for (int r = 0; r < 4; r++) keys[r] = splitmix(seed ^ splitmix((uint64_t)epoch * 4 + (uint64_t)r));
    uint64_t x = index;
    do {
        uint64_t l = x >> half, rr = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t f = splitmix(rr ^ keys[r]) & mask;
            uint64_t t = l ^ f;
            l = rr;
            rr = t;
        }
        x = l << half | rr;
    } while (x >= n);
    return x;
}

static void window(const gd_token_data *d, int64_t start, int64_t T, int32_t *x, int32_t *y)
{
    int32_t prev = token_at(d, start);
    for (int64_t i = 0; i < T; i++) {
        int32_t next = token_at(d, start + i + 1);
        x[i] = prev;
        y[i] = next;
        prev = next;
    }
}

gd_status gd_token_data_batch(gd_token_data *d, int split, int64_t B, int64_t T, gd_data_pos *pos, int32_t *x,
                              int32_t *y)
{
    if (d == NULL) return GD_ERR_INVALID;
    gd_ctx *ctx = d->ctx;
    if (x == NULL || y == NULL || (split == GD_SPLIT_TRAIN && pos == NULL))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: batch: %s is NULL", d->name,
                           x == NULL || y == NULL ? "an output" : "the position");
    int64_t bt;
    if (B <= 0 || T <= 0 || gd_mul_i64(B, T, &bt) != 0)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: batch of %lld windows of %lld tokens", d->name, (long long)B,
                           (long long)T);
    if (split == GD_SPLIT_VAL) {
        int64_t n_val = d->n_tokens - d->val_start;
        if (n_val == 0)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: there is no validation split (opened with fraction 0)", d->name);
        if (n_val - 1 < T)
            return gd_ctx_fail(ctx, GD_ERR_INVALID,
                               "%s: the validation split has %lld tokens, fewer than a window of %lld+1", d->name,
                               (long long)n_val, (long long)T);
        /* batch `index` of fixed windows, wrapping: the same batches at every validation */
        int64_t windows = (n_val - 1) / T, first = pos != NULL && pos->index > 0 ? pos->index % windows : 0;
        for (int64_t b = 0; b < B; b++)
            window(d, d->val_start + ((first * B + b) % windows) * T, T, x + b * T, y + b * T);
        return GD_OK;
    }
    if (split != GD_SPLIT_TRAIN) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: no split %d", d->name, split);
    if (d->train_end - 1 < T)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: the training split has %lld tokens, fewer than a window of %lld+1",
                           d->name, (long long)d->train_end, (long long)T);
    if (pos->epoch < 0 || pos->index < 0)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: data position (epoch %lld, index %lld) is negative", d->name,
                           (long long)pos->epoch, (long long)pos->index);
    int64_t windows = (d->train_end - 1) / T;
    for (int64_t b = 0; b < B; b++) {
        if (pos->index >= windows) {
            pos->epoch++;
            pos->index = 0;
        }
        uint64_t w = permute(pos->seed, pos->epoch, (uint64_t)pos->index, (uint64_t)windows);
        pos->index++;
        window(d, (int64_t)w * T, T, x + b * T, y + b * T);
    }
    return GD_OK;
}
