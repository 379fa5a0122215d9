/* bpe_encode.c — encoding and decoding (gradus_lm.h).
 *
 * Text is cut at added tokens (leftmost, longest), each stretch between them normalized
 * when the tokenizer says so and cut into pieces by the pre-tokenizer, and each piece's
 * bytes merged: the lowest-ranked merge of two neighbouring tokens first, the leftmost of
 * equals first, until no neighbours have a merge. Text repeats its words, so an encoding
 * keeps the ids of each short piece it has merged (a cache that lives for the call, so a
 * tokenizer may be shared by threads). Merging uses a heap of neighbouring pairs, so no
 * piece (a run of one letter, a page of spaces) costs quadratic time. */
#include "bpe.h"

#include "alloc.h"
#include "checked.h"
#include "unicode.h"
#include "unicode_nfc.h"

#include <stdio.h>

/* Pieces up to this long are cached. */
#define CACHE_MAX_PIECE 64
#define CACHE_MAX_ENTRIES (1u << 20)

typedef struct centry {
    uint64_t hash;
    uint32_t key_off, key_len;
    uint32_t ids_off, n_ids; /* n_ids == 0: empty slot */
} centry;

/* A merge waiting in the heap: (rank << 32 | position), the smallest first (the lowest
 * rank, leftmost), and the id it makes. */
typedef struct hentry {
    uint64_t key;
    int32_t id;
} hentry;

typedef struct encoder {
    const gd_tokenizer *t;
    int32_t *out;
    size_t n_out, cap_out;
    centry *slots;
    size_t cap, count;
    uint8_t *keys;
    size_t keys_len, keys_cap;
    int32_t *cids;
    size_t cids_len, cids_cap;
    /* merging */
    int32_t *sym, *prev, *next;
    hentry *heap;
    size_t work_cap;
    int nomem;
} encoder;

static int reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    return gd_grow_array(p, cap, need, elem, 64);
}

static inline void emit(encoder *e, int32_t id)
{
    if (e->n_out == e->cap_out && reserve((void **)&e->out, &e->cap_out, e->n_out + 1, sizeof(int32_t)) != 0) {
        e->nomem = 1;
        return;
    }
    e->out[e->n_out++] = id;
}

/* ---- merging one piece ------------------------------------------------------------------- */

static int work_reserve(encoder *e, size_t m)
{
    if (m <= e->work_cap) return 0;
    size_t cap = m < 256 ? 256 : m, b4, b8;
    if (gd_mul_size(cap, sizeof(int32_t), &b4) != 0 || gd_mul_size(cap, 3 * sizeof(hentry), &b8) != 0) return -1;
    int32_t **arr[3] = {&e->sym, &e->prev, &e->next};
    for (int k = 0; k < 3; k++) {
        int32_t *q = gd_realloc(*arr[k], b4);
        if (q == NULL) return -1;
        *arr[k] = q;
    }
    hentry *h = gd_realloc(e->heap, b8);
    if (h == NULL) return -1;
    e->heap = h;
    e->work_cap = cap;
    return 0;
}

static void heap_push(hentry *h, size_t *n, uint64_t key, int32_t id)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up].key <= key) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = (hentry){key, id};
}

static hentry heap_pop(hentry *h, size_t *n)
{
    hentry top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].key < h[c].key) c++;
        if (v.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Merges the m symbols in e->sym as `tokenizers` does (its Word::merge_all), returning
 * how many remain in e->sym[0..]. Symbols form a linked list; a heap holds the merges of
 * neighbours. A popped merge is stale if its left symbol has been merged away or has no
 * right neighbour; otherwise it applies when the pair there now makes the same id, which
 * is `tokenizers`' test too: so when two pairs make one token ("ab"+"c", "a"+"bc") the
 * pair there now is merged at the rank of the one first seen, and ids match it exactly. */
static size_t merge_word(encoder *e, size_t m)
{
    const gd_tokenizer *t = e->t;
    int32_t *sym = e->sym, *prev = e->prev, *next = e->next;
    hentry *h = e->heap;
    size_t hn = 0;
    int32_t c;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < m; i++) {
        int32_t r = gd_bpe_merge_rank(t, sym[i], sym[i + 1], &c);
        if (r >= 0) heap_push(h, &hn, (uint64_t)r << 32 | i, c);
    }
    while (hn > 0) {
        hentry top = heap_pop(h, &hn);
        int32_t pos = (int32_t)(uint32_t)top.key;
        if (sym[pos] < 0) continue;
        int32_t nx = next[pos];
        if (nx < 0 || gd_bpe_merge_rank(t, sym[pos], sym[nx], &c) < 0 || c != top.id) continue;
        sym[pos] = top.id;
        sym[nx] = -1;
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = pos;
        if (prev[pos] >= 0) {
            int32_t r = gd_bpe_merge_rank(t, sym[prev[pos]], sym[pos], &c);
            if (r >= 0) heap_push(h, &hn, (uint64_t)r << 32 | (uint32_t)prev[pos], c);
        }
        if (next[pos] >= 0) {
            int32_t r = gd_bpe_merge_rank(t, sym[pos], sym[next[pos]], &c);
            if (r >= 0) heap_push(h, &hn, (uint64_t)r << 32 | (uint32_t)pos, c);
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    return k;
}

/* The ids of one piece, appended to the output. */
static void encode_piece(encoder *e, const uint8_t *w, size_t m)
{
    const gd_tokenizer *t = e->t;
    if (m == 1) {
        emit(e, t->byte_id[w[0]]);
        return;
    }
    if (t->ignore_merges) {
        int32_t id = gd_bpe_lookup(t, w, m);
        if (id >= 0) {
            emit(e, id);
            return;
        }
    }
    if (m > INT32_MAX || work_reserve(e, m) != 0) {
        e->nomem = 1;
        return;
    }
    for (size_t i = 0; i < m; i++) e->sym[i] = t->byte_id[w[i]];
    size_t k = merge_word(e, m);
    for (size_t i = 0; i < k; i++) emit(e, e->sym[i]);
}

/* ---- the cache of pieces ----------------------------------------------------------------- */

static int cache_grow(encoder *e)
{
    size_t cap = e->cap ? e->cap * 2 : 1024;
    centry *slots = gd_calloc(cap, sizeof *slots);
    if (slots == NULL) return -1;
    for (size_t i = 0; i < e->cap; i++)
        if (e->slots[i].n_ids) {
            size_t j = e->slots[i].hash & (cap - 1);
            while (slots[j].n_ids) j = (j + 1) & (cap - 1);
            slots[j] = e->slots[i];
        }
    gd_free(e->slots);
    e->slots = slots;
    e->cap = cap;
    return 0;
}

static void encode_cached(encoder *e, const uint8_t *w, size_t m)
{
    if (m > CACHE_MAX_PIECE || m == 1) {
        encode_piece(e, w, m);
        return;
    }
    uint64_t h = gd_hash_bytes(w, m);
    size_t mask = e->cap - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
        const centry *c = &e->slots[i];
        if (c->n_ids == 0) break;
        if (c->hash == h && c->key_len == m && memcmp(e->keys + c->key_off, w, m) == 0) {
            if (e->n_out + c->n_ids > e->cap_out &&
                reserve((void **)&e->out, &e->cap_out, e->n_out + c->n_ids, sizeof(int32_t)) != 0) {
                e->nomem = 1;
                return;
            }
            memcpy(e->out + e->n_out, e->cids + c->ids_off, c->n_ids * sizeof(int32_t));
            e->n_out += c->n_ids;
            return;
        }
    }
    size_t start = e->n_out;
    encode_piece(e, w, m);
    if (e->nomem || e->count >= CACHE_MAX_ENTRIES) return;
    size_t k = e->n_out - start;
    if (reserve((void **)&e->keys, &e->keys_cap, e->keys_len + m, 1) != 0 ||
        reserve((void **)&e->cids, &e->cids_cap, e->cids_len + k, sizeof(int32_t)) != 0) {
        e->nomem = 1;
        return;
    }
    if ((e->count + 1) * 2 > e->cap) {
        if (cache_grow(e) != 0) {
            e->nomem = 1;
            return;
        }
        mask = e->cap - 1;
        for (i = h & mask; e->slots[i].n_ids; i = (i + 1) & mask) {
        }
    }
    memcpy(e->keys + e->keys_len, w, m);
    memcpy(e->cids + e->cids_len, e->out + start, k * sizeof(int32_t));
    e->slots[i] = (centry){h, (uint32_t)e->keys_len, (uint32_t)m, (uint32_t)e->cids_len, (uint32_t)k};
    e->keys_len += m;
    e->cids_len += k;
    e->count++;
}

/* ---- text between added tokens ----------------------------------------------------------- */

static void encode_text(encoder *e, const uint8_t *s, size_t n)
{
    const gd_tokenizer *t = e->t;
    uint8_t *norm = NULL;
    if (n == 0) return;
    if (t->nfc && !gd_nfc_quick(s, n)) {
        norm = gd_nfc(s, n, &n);
        if (norm == NULL) {
            e->nomem = 1;
            return;
        }
        s = norm;
    }
    if (t->add_prefix_space && s[0] != ' ') {
        size_t n1;
        uint8_t *p = gd_add_size(n, 1, &n1) == 0 ? gd_malloc(n1) : NULL;
        if (p == NULL) {
            gd_free(norm);
            e->nomem = 1;
            return;
        }
        p[0] = ' ';
        memcpy(p + 1, s, n);
        gd_free(norm);
        s = norm = p;
        n = n1;
    }
    for (size_t p = 0; p < n && !e->nomem;) {
        size_t q = gd_pretok_next(t->pretok, s, n, p);
        encode_cached(e, s + p, q - p);
        p = q;
    }
    gd_free(norm);
}

static int is_space_at(const uint8_t *s, size_t n, size_t p, size_t *len)
{
    uint32_t cp;
    *len = gd_utf8_next(s + p, n - p, &cp);
    return cp != 0xFFFFFFFFu && gd_uc_class(cp) == GD_UC_S;
}

/* The leftmost added token in s[p..n), the longest there: its span (with the spaces
 * lstrip and rstrip take) and index, or -1. */
static int find_added(const gd_tokenizer *t, const uint8_t *s, size_t n, size_t p, size_t *ms, size_t *me)
{
    for (size_t i = p; i < n; i++) {
        if (!t->added_first[s[i]]) continue;
        for (int k = 0; k < t->n_added; k++) {
            const gd_added_token *a = &t->added[k];
            if (a->len > n - i || a->bytes[0] != s[i] || memcmp(a->bytes, s + i, a->len) != 0) continue;
            size_t b = i, end = i + a->len, len;
            if (a->lstrip)
                while (b > p) {
                    /* step back over one whitespace character */
                    size_t q = b - 1;
                    while (q > p && (s[q] & 0xC0) == 0x80 && b - q < 4) q--;
                    if (!is_space_at(s, n, q, &len) || q + len != b) break;
                    b = q;
                }
            if (a->rstrip)
                while (end < n && is_space_at(s, n, end, &len)) end += len;
            *ms = b;
            *me = end;
            return k;
        }
    }
    return -1;
}

gd_status gd_tokenizer_encode(gd_ctx *ctx, const gd_tokenizer *t, const uint8_t *text, size_t n, int32_t **ids,
                              size_t *n_ids)
{
    if (ids != NULL) *ids = NULL;
    if (n_ids != NULL) *n_ids = 0;
    if (t == NULL || ids == NULL || n_ids == NULL || (text == NULL && n > 0))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer encode: %s is NULL",
                           t == NULL ? "the tokenizer" : ids == NULL || n_ids == NULL ? "an output" : "the text");
    if (t->sp_score != NULL) return gd_sp_encode(ctx, t, text, n, ids, n_ids);
    encoder e = {.t = t};
    size_t guess = n / 3 + 16;
    if (reserve((void **)&e.out, &e.cap_out, guess, sizeof(int32_t)) != 0 || cache_grow(&e) != 0) e.nomem = 1;
    for (size_t p = 0; p < n && !e.nomem;) {
        size_t ms = n, me = n;
        int k = t->n_added > 0 ? find_added(t, text, n, p, &ms, &me) : -1;
        encode_text(&e, text + p, ms - p);
        if (k >= 0) emit(&e, t->added[k].id);
        p = me;
    }
    gd_free(e.slots);
    gd_free(e.keys);
    gd_free(e.cids);
    gd_free(e.sym);
    gd_free(e.prev);
    gd_free(e.next);
    gd_free(e.heap);
    if (e.nomem) {
        gd_free(e.out);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer encode: out of memory encoding %zu bytes", n);
    }
    if (e.out == NULL) { /* nothing was encoded: still hand out a buffer to free */
        e.out = gd_malloc(sizeof(int32_t));
        if (e.out == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer encode: out of memory");
    }
    *ids = e.out;
    *n_ids = e.n_out;
    return GD_OK;
}

gd_status gd_tokenizer_decode(gd_ctx *ctx, const gd_tokenizer *t, const int32_t *ids, size_t n, uint8_t **text,
                              size_t *len)
{
    if (text != NULL) *text = NULL;
    if (len != NULL) *len = 0;
    if (t == NULL || text == NULL || len == NULL || (ids == NULL && n > 0))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer decode: %s is NULL",
                           t == NULL ? "the tokenizer" : ids == NULL && n > 0 ? "the ids" : "an output");
    size_t total = 0, tl;
    for (size_t i = 0; i < n; i++) {
        if (gd_bpe_bytes(t, ids[i], &tl) == NULL)
            return gd_ctx_fail(ctx, GD_ERR_INVALID,
                               "tokenizer decode: id %ld at position %zu is not in the vocabulary (size %ld)",
                               (long)ids[i], i, (long)t->n_ids);
        if (gd_add_size(total, tl, &total) != 0)
            return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer decode: the text is too long");
    }
    uint8_t *out = total + 1 > total ? gd_malloc(total + 1) : NULL;
    if (out == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer decode: out of memory for %zu bytes", total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = gd_bpe_bytes(t, ids[i], &tl);
        memcpy(out + at, b, tl);
        at += tl;
    }
    out[at] = 0;
    *text = out;
    *len = total;
    return GD_OK;
}
