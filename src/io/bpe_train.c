/* bpe_train.c — training a byte-level BPE tokenizer (gd_tokenizer_train).
 *
 * The text is cut into pieces as GPT-2's pre-tokenizer does and the distinct pieces
 * counted (a text of millions of words has tens of thousands of distinct ones). Each
 * merge then joins the most frequent pair of neighbouring tokens over all pieces. Pair
 * counts are kept up to date as merges happen instead of being recounted: each pair
 * knows the pieces it occurs in, so a merge visits only those, and adjusts the counts
 * of the pairs around each occurrence. The most frequent pair comes from a max-heap
 * whose entries may be stale (a count that has since dropped); a popped entry whose
 * count is not the pair's count now is pushed back with the right one. Ties go to the
 * pair of smaller ids, so training is deterministic. */
#include "bpe.h"

#include "alloc.h"
#include "checked.h"

#include <stdio.h>
#include <stdlib.h>

static const char eot[] = "<|endoftext|>";

typedef struct word {
    const uint8_t *bytes; /* its first occurrence in the text */
    uint32_t len;         /* bytes, and symbols before any merge */
    uint32_t n;           /* symbols now */
    size_t sym;           /* its symbols: syms[sym .. sym + n) */
    int64_t count;
} word;

typedef struct pair {
    int32_t a, b;
    int64_t count;
    int32_t *words; /* pieces it occurs (or occurred) in, each once in a row */
    uint32_t n_words, cap_words;
    uint32_t touched; /* the merge that last raised its count */
} pair;

typedef struct hentry {
    int64_t count;
    int32_t a, b, pair;
} hentry;

typedef struct trainer {
    word *words;
    size_t n_words, cap_words;
    size_t *wslots; /* words by bytes: index + 1, 0 empty */
    size_t wcap;
    int32_t *syms;
    pair *pairs;
    size_t n_pairs, cap_pairs;
    int32_t *pslots; /* pairs by (a, b): index, -1 empty */
    size_t pcap;
    hentry *heap;
    size_t n_heap, cap_heap;
    int32_t *touched;
    size_t n_touched, cap_touched;
} trainer;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return gd_grow_array(p, cap, need, elem, 256);
}

/* ---- distinct pieces ------------------------------------------------------------------ */

static int add_word(trainer *tr, const uint8_t *s, size_t n)
{
    if (n > UINT32_MAX) return -1;
    if ((tr->n_words + 1) * 2 > tr->wcap) {
        size_t cap = tr->wcap ? tr->wcap * 2 : 4096;
        size_t *slots = gd_calloc(cap, sizeof *slots);
        if (slots == NULL) return -1;
        for (size_t i = 0; i < tr->wcap; i++)
            if (tr->wslots[i]) {
                const word *w = &tr->words[tr->wslots[i] - 1];
                size_t j = gd_hash_bytes(w->bytes, w->len) & (cap - 1);
                while (slots[j]) j = (j + 1) & (cap - 1);
                slots[j] = tr->wslots[i];
            }
        gd_free(tr->wslots);
        tr->wslots = slots;
        tr->wcap = cap;
    }
    size_t mask = tr->wcap - 1, i = gd_hash_bytes(s, n) & mask;
    for (; tr->wslots[i]; i = (i + 1) & mask) {
        word *w = &tr->words[tr->wslots[i] - 1];
        if (w->len == n && memcmp(w->bytes, s, n) == 0) {
            w->count++;
            return 0;
        }
    }
    if (grow((void **)&tr->words, &tr->cap_words, tr->n_words + 1, sizeof(word)) != 0) return -1;
    tr->words[tr->n_words] = (word){.bytes = s, .len = (uint32_t)n, .count = 1};
    tr->wslots[i] = ++tr->n_words;
    return 0;
}

/* ---- pairs -------------------------------------------------------------------------------- */

static int32_t find_pair(trainer *tr, int32_t a, int32_t b, int create)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    if (create && (tr->n_pairs + 1) * 2 > tr->pcap) {
        size_t cap = tr->pcap ? tr->pcap * 2 : 1 << 14;
        int32_t *slots = gd_malloc(cap * sizeof *slots);
        if (slots == NULL) return -2;
        for (size_t i = 0; i < cap; i++) slots[i] = -1;
        for (size_t i = 0; i < tr->pcap; i++)
            if (tr->pslots[i] >= 0) {
                const pair *p = &tr->pairs[tr->pslots[i]];
                size_t j = gd_hash_u64((uint64_t)(uint32_t)p->a << 32 | (uint32_t)p->b) & (cap - 1);
                while (slots[j] >= 0) j = (j + 1) & (cap - 1);
                slots[j] = tr->pslots[i];
            }
        gd_free(tr->pslots);
        tr->pslots = slots;
        tr->pcap = cap;
    }
    size_t mask = tr->pcap - 1, i = gd_hash_u64(key) & mask;
    for (; tr->pslots[i] >= 0; i = (i + 1) & mask) {
        const pair *p = &tr->pairs[tr->pslots[i]];
        if (p->a == a && p->b == b) return tr->pslots[i];
    }
    if (!create) return -1;
    if (tr->n_pairs >= INT32_MAX || grow((void **)&tr->pairs, &tr->cap_pairs, tr->n_pairs + 1, sizeof(pair)) != 0)
        return -2;
    tr->pairs[tr->n_pairs] = (pair){.a = a, .b = b, .touched = UINT32_MAX};
    tr->pslots[i] = (int32_t)tr->n_pairs;
    return (int32_t)tr->n_pairs++;
}

/* Adds delta occurrences of (a, b) in word w (a rise also records w and the pair as
 * touched by merge `step`). */
static int count_pair(trainer *tr, int32_t a, int32_t b, int32_t w, int64_t delta, uint32_t step)
{
    int32_t k = find_pair(tr, a, b, delta > 0);
    if (k == -2) return -1;
    if (k < 0) return 0;
    pair *p = &tr->pairs[k];
    p->count += delta;
    if (delta > 0) {
        if (p->n_words == 0 || p->words[p->n_words - 1] != w) {
            size_t cap = p->cap_words;
            if (grow((void **)&p->words, &cap, (size_t)p->n_words + 1, sizeof(int32_t)) != 0 || cap > UINT32_MAX)
                return -1;
            p->cap_words = (uint32_t)cap;
            p->words[p->n_words++] = w;
        }
        if (p->touched != step) {
            p->touched = step;
            if (grow((void **)&tr->touched, &tr->cap_touched, tr->n_touched + 1, sizeof(int32_t)) != 0) return -1;
            tr->touched[tr->n_touched++] = k;
        }
    }
    return 0;
}

/* ---- the heap: the most frequent pair on top, ties to smaller ids ------------------------- */

static int above(const hentry *x, const hentry *y)
{
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static int heap_push(trainer *tr, int32_t k)
{
    if (grow((void **)&tr->heap, &tr->cap_heap, tr->n_heap + 1, sizeof(hentry)) != 0) return -1;
    const pair *p = &tr->pairs[k];
    hentry v = {p->count, p->a, p->b, k};
    size_t i = tr->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!above(&v, &tr->heap[up])) break;
        tr->heap[i] = tr->heap[up];
        i = up;
    }
    tr->heap[i] = v;
    return 0;
}

static hentry heap_pop(trainer *tr)
{
    hentry top = tr->heap[0], v = tr->heap[--tr->n_heap];
    size_t i = 0, n = tr->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && above(&tr->heap[c + 1], &tr->heap[c])) c++;
        if (!above(&tr->heap[c], &v)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n > 0) tr->heap[i] = v;
    return top;
}

/* Replaces each (a, b) in word w by c, adjusting the counts of the pairs around it. */
static int merge_word(trainer *tr, int32_t w, int32_t a, int32_t b, int32_t c, uint32_t step)
{
    word *wd = &tr->words[w];
    int32_t *s = tr->syms + wd->sym;
    int64_t cnt = wd->count;
    uint32_t n = wd->n, j = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (j > 0) {
                if (count_pair(tr, s[j - 1], a, w, -cnt, step) != 0 || count_pair(tr, s[j - 1], c, w, cnt, step) != 0)
                    return -1;
            }
            if (i + 2 < n) {
                if (count_pair(tr, b, s[i + 2], w, -cnt, step) != 0 || count_pair(tr, c, s[i + 2], w, cnt, step) != 0)
                    return -1;
            }
            if (count_pair(tr, a, b, w, -cnt, step) != 0) return -1;
            s[j++] = c;
            i++;
        } else {
            s[j++] = s[i];
        }
    }
    wd->n = j;
    return 0;
}

/* The next "<|endoftext|>" in s[0..n), or NULL. */
static const uint8_t *find_eot(const uint8_t *s, size_t n)
{
    const size_t len = sizeof eot - 1;
    for (size_t i = 0; i + len <= n;) {
        const uint8_t *q = memchr(s + i, '<', n - i - len + 1);
        if (q == NULL) return NULL;
        if (memcmp(q, eot, len) == 0) return q;
        i = (size_t)(q - s) + 1;
    }
    return NULL;
}

static void trainer_free(trainer *tr)
{
    for (size_t i = 0; i < tr->n_pairs; i++) gd_free(tr->pairs[i].words);
    gd_free(tr->pairs);
    gd_free(tr->pslots);
    gd_free(tr->words);
    gd_free(tr->wslots);
    gd_free(tr->syms);
    gd_free(tr->heap);
    gd_free(tr->touched);
}

gd_status gd_tokenizer_train(gd_ctx *ctx, const uint8_t *text, size_t n, int32_t vocab_size, gd_tokenizer **out)
{
    if (out != NULL) *out = NULL;
    if (out == NULL || (text == NULL && n > 0))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer train: %s is NULL", out == NULL ? "the output" : "the text");
    if (vocab_size < 257 || vocab_size > GD_BPE_MAX_ID)
        return gd_ctx_fail(ctx, GD_ERR_INVALID,
                           "tokenizer train: vocabulary size %ld is outside 257 (the 256 bytes and <|endoftext|>) "
                           "to %d",
                           (long)vocab_size, GD_BPE_MAX_ID);
    trainer tr = {0};
    gd_tokenizer *t = NULL;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    char why[256];
    const size_t eot_len = sizeof eot - 1;

    /* the distinct pieces, with <|endoftext|> markers in the text left out */
    for (size_t p = 0; p < n;) {
        const uint8_t *m = find_eot(text + p, n - p);
        size_t end = m != NULL ? (size_t)(m - text) : n;
        while (p < end) {
            size_t q = gd_pretok_next(GD_PRETOK_GPT2, text, end, p);
            if (add_word(&tr, text + p, q - p) != 0) goto nomem;
            p = q;
        }
        p = m != NULL ? end + eot_len : n;
    }
    if (tr.n_words == 0) {
        trainer_free(&tr);
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer train: the text is empty");
    }

    /* symbols: the bytes of each piece */
    size_t total = 0;
    for (size_t i = 0; i < tr.n_words; i++) {
        tr.words[i].sym = total;
        tr.words[i].n = tr.words[i].len;
        total += tr.words[i].len;
    }
    size_t sbytes;
    if (gd_mul_size(total, sizeof(int32_t), &sbytes) != 0 || (tr.syms = gd_malloc(sbytes)) == NULL) goto nomem;
    for (size_t i = 0; i < tr.n_words; i++)
        for (uint32_t k = 0; k < tr.words[i].len; k++) tr.syms[tr.words[i].sym + k] = tr.words[i].bytes[k];

    t = gd_bpe_new();
    if (t == NULL) goto nomem;
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        if (gd_bpe_set_token(t, b, &byte, 1, GD_TOK_MODEL, why, sizeof why) != GD_OK) goto nomem;
    }

    for (size_t i = 0; i < tr.n_words; i++) {
        const word *w = &tr.words[i];
        for (uint32_t k = 0; k + 1 < w->n; k++)
            if (count_pair(&tr, tr.syms[w->sym + k], tr.syms[w->sym + k + 1], (int32_t)i, w->count, 0) != 0) goto nomem;
    }
    for (size_t k = 0; k < tr.n_pairs; k++)
        if (heap_push(&tr, (int32_t)k) != 0) goto nomem;

    int32_t next_id = 256;
    for (uint32_t step = 1; next_id < vocab_size - 1 && tr.n_heap > 0;) {
        hentry top = heap_pop(&tr);
        pair *p = &tr.pairs[top.pair];
        if (p->count <= 0) continue;
        if (p->count != top.count) {
            if (heap_push(&tr, top.pair) != 0) goto nomem;
            continue;
        }
        size_t la = 0, lb = 0;
        const uint8_t *ba = gd_bpe_bytes(t, p->a, &la), *bb = gd_bpe_bytes(t, p->b, &lb);
        if (grow((void **)&buf, &buf_cap, la + lb, 1) != 0) goto nomem;
        memcpy(buf, ba, la);
        memcpy(buf + la, bb, lb);
        /* two merges may make the same bytes ("ab"+"c", "a"+"bc"): one token */
        int32_t c = gd_bpe_lookup(t, buf, la + lb);
        if (c < 0) {
            c = next_id++;
            if (gd_bpe_set_token(t, c, buf, la + lb, GD_TOK_MODEL, why, sizeof why) != GD_OK) goto nomem;
        }
        int32_t a = p->a, b = p->b;
        if (gd_bpe_add_merge(t, a, b, c, why, sizeof why) != GD_OK) goto nomem;
        tr.n_touched = 0;
        /* the pair's list may grow while it is walked only through other pairs */
        for (uint32_t i = 0; i < tr.pairs[top.pair].n_words; i++)
            if (merge_word(&tr, tr.pairs[top.pair].words[i], a, b, c, step) != 0) goto nomem;
        gd_free(tr.pairs[top.pair].words);
        tr.pairs[top.pair].words = NULL;
        tr.pairs[top.pair].n_words = tr.pairs[top.pair].cap_words = 0;
        for (size_t i = 0; i < tr.n_touched; i++)
            if (heap_push(&tr, tr.touched[i]) != 0) goto nomem;
        step++;
    }
    gd_free(buf);
    trainer_free(&tr);

    static const uint8_t *const eot_bytes = (const uint8_t *)eot;
    if (gd_bpe_set_token(t, next_id, eot_bytes, eot_len, GD_TOK_ADDED | GD_TOK_SPECIAL, why, sizeof why) != GD_OK ||
        gd_bpe_add_added(t, next_id, 0, 0, 0, 1) != GD_OK) {
        gd_tokenizer_free(t);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer train: out of memory");
    }
    t->pretok = GD_PRETOK_GPT2;
    if (gd_bpe_finish(t, why, sizeof why) != GD_OK) {
        gd_tokenizer_free(t);
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "tokenizer train: %s", why);
    }
    *out = t;
    return GD_OK;

nomem:
    gd_free(buf);
    trainer_free(&tr);
    gd_tokenizer_free(t);
    return gd_ctx_fail(ctx, GD_ERR_NOMEM, "tokenizer train: out of memory (%zu bytes of text)", n);
}
