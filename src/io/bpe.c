/* bpe.c — the tokenizer's tables and how they are built; see bpe.h. Encoding is in
 * bpe_encode.c, training in bpe_train.c, the file format in tokenizer_json.c. */
#include "bpe.h"

#include "alloc.h"
#include "checked.h"

#include <stdio.h>
#include <stdlib.h>

void gd_free_mem(void *p) { gd_free(p); }

uint32_t gd_bytelevel_char(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    /* the others in byte order: 0x00-0x20, 0x7F-0xA0, 0xAD */
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 0x21 + (b - 0x7Fu);
    return 0x100u + 0x21 + 0x22;
}

int gd_bytelevel_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp > 0x143) return -1;
    uint32_t k = cp - 0x100;
    if (k <= 0x20) return (int)k;
    if (k < 0x21 + 0x22) return (int)(0x7F + (k - 0x21));
    return 0xAD;
}

gd_tokenizer *gd_bpe_new(void)
{
    gd_tokenizer *t = gd_calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    t->eos = -1;
    t->vocab.cap = 1024;
    t->vocab.slots = gd_malloc(t->vocab.cap * sizeof *t->vocab.slots);
    t->merge_cap = 1024;
    t->merges = gd_malloc(t->merge_cap * sizeof *t->merges);
    if (t->vocab.slots == NULL || t->merges == NULL) {
        gd_tokenizer_free(t);
        return NULL;
    }
    for (size_t i = 0; i < t->vocab.cap; i++) t->vocab.slots[i] = -1;
    for (size_t i = 0; i < t->merge_cap; i++) t->merges[i].key = UINT64_MAX;
    return t;
}

void gd_tokenizer_free(gd_tokenizer *t)
{
    if (t == NULL) return;
    gd_free(t->off);
    gd_free(t->len);
    gd_free(t->flags);
    gd_free(t->pool);
    gd_free(t->vocab.slots);
    gd_free(t->merges);
    gd_free(t->merge_list);
    gd_free(t->added);
    gd_free(t->sp_score);
    gd_free(t);
}

int32_t gd_tokenizer_vocab_size(const gd_tokenizer *t) { return t != NULL ? t->n_ids : 0; }
int32_t gd_tokenizer_eos(const gd_tokenizer *t) { return t != NULL ? t->eos : -1; }

const uint8_t *gd_tokenizer_token(const gd_tokenizer *t, int32_t id, size_t *len)
{
    size_t n = 0;
    const uint8_t *p = t != NULL ? gd_bpe_bytes(t, id, &n) : NULL;
    if (len != NULL) *len = p != NULL ? n : 0;
    return p;
}

/* ---- the vocabulary map --------------------------------------------------------------- */

int32_t gd_bpe_lookup(const gd_tokenizer *t, const uint8_t *s, size_t n)
{
    size_t mask = t->vocab.cap - 1;
    for (size_t i = gd_hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = t->vocab.slots[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->pool + t->off[id], s, n) == 0) return id;
    }
}

static void vocab_place(gd_tokenizer *t, int32_t *slots, size_t cap, int32_t id)
{
    size_t mask = cap - 1;
    size_t i = gd_hash_bytes(t->pool + t->off[id], t->len[id]) & mask;
    while (slots[i] >= 0) i = (i + 1) & mask;
    slots[i] = id;
}

static gd_status vocab_insert(gd_tokenizer *t, int32_t id)
{
    if ((t->vocab.count + 1) * 2 > t->vocab.cap) {
        size_t cap = t->vocab.cap * 2, bytes;
        if (gd_mul_size(cap, sizeof(int32_t), &bytes) != 0) return GD_ERR_NOMEM;
        int32_t *slots = gd_malloc(bytes);
        if (slots == NULL) return GD_ERR_NOMEM;
        for (size_t i = 0; i < cap; i++) slots[i] = -1;
        for (size_t i = 0; i < t->vocab.cap; i++)
            if (t->vocab.slots[i] >= 0) vocab_place(t, slots, cap, t->vocab.slots[i]);
        gd_free(t->vocab.slots);
        t->vocab.slots = slots;
        t->vocab.cap = cap;
    }
    vocab_place(t, t->vocab.slots, t->vocab.cap, id);
    t->vocab.count++;
    return GD_OK;
}

/* ---- tokens ------------------------------------------------------------------------------ */

static gd_status grow_ids(gd_tokenizer *t, int32_t need)
{
    if (need <= t->cap_ids) return GD_OK;
    int32_t cap = t->cap_ids ? t->cap_ids : 512;
    while (cap < need) cap = cap > GD_BPE_MAX_ID / 2 ? GD_BPE_MAX_ID : cap * 2;
    uint64_t *off = gd_realloc(t->off, (size_t)cap * sizeof *off);
    if (off == NULL) return GD_ERR_NOMEM;
    t->off = off;
    uint32_t *len = gd_realloc(t->len, (size_t)cap * sizeof *len);
    if (len == NULL) return GD_ERR_NOMEM;
    t->len = len;
    uint8_t *flags = gd_realloc(t->flags, (size_t)cap);
    if (flags == NULL) return GD_ERR_NOMEM;
    t->flags = flags;
    memset(t->flags + t->cap_ids, 0, (size_t)(cap - t->cap_ids));
    t->cap_ids = cap;
    return GD_OK;
}

gd_status gd_bpe_set_token(gd_tokenizer *t, int32_t id, const uint8_t *s, size_t n, int flags, char *why,
                           size_t cap)
{
    if (id < 0 || id >= GD_BPE_MAX_ID) {
        snprintf(why, cap, "id %ld is out of range (0 to %d)", (long)id, GD_BPE_MAX_ID - 1);
        return GD_ERR_INVALID;
    }
    if (n > UINT32_MAX / 2) {
        snprintf(why, cap, "token %ld is %zu bytes long", (long)id, n);
        return GD_ERR_INVALID;
    }
    if (grow_ids(t, id + 1) != GD_OK) return GD_ERR_NOMEM;
    if (t->flags[id] != 0) {
        /* tokenizer.json lists an added token in the model's vocabulary too (GPT-2's
         * <|endoftext|>): the same bytes under the same id is one token */
        if (t->len[id] == n && memcmp(t->pool + t->off[id], s, n) == 0) {
            if ((flags & GD_TOK_MODEL) && !(t->flags[id] & GD_TOK_MODEL)) {
                if (gd_bpe_lookup(t, s, n) >= 0) goto dup;
                if (vocab_insert(t, id) != GD_OK) return GD_ERR_NOMEM;
            }
            t->flags[id] |= (uint8_t)flags;
            return GD_OK;
        }
        snprintf(why, cap, "id %ld is given to two different tokens", (long)id);
        return GD_ERR_INVALID;
    }
    if ((flags & GD_TOK_MODEL) && gd_bpe_lookup(t, s, n) >= 0) goto dup;
    size_t need;
    if (gd_add_size(t->pool_len, n, &need) != 0) return GD_ERR_NOMEM;
    if (need > t->pool_cap) {
        size_t pcap = t->pool_cap ? t->pool_cap : 4096;
        while (pcap < need)
            if (gd_mul_size(pcap, 2, &pcap) != 0) return GD_ERR_NOMEM;
        uint8_t *pool = gd_realloc(t->pool, pcap);
        if (pool == NULL) return GD_ERR_NOMEM;
        t->pool = pool;
        t->pool_cap = pcap;
    }
    if (n) memcpy(t->pool + t->pool_len, s, n);
    t->off[id] = t->pool_len;
    t->len[id] = (uint32_t)n;
    t->pool_len += n;
    t->flags[id] = (uint8_t)flags;
    if (id >= t->n_ids) t->n_ids = id + 1;
    if (flags & GD_TOK_MODEL) {
        if (vocab_insert(t, id) != GD_OK) {
            t->flags[id] = 0;
            return GD_ERR_NOMEM;
        }
        if (n == 1) t->byte_id[s[0]] = id;
    }
    return GD_OK;
dup:
    snprintf(why, cap, "token %ld repeats the bytes of token %ld", (long)id, (long)gd_bpe_lookup(t, s, n));
    return GD_ERR_INVALID;
}

/* ---- merges -------------------------------------------------------------------------------- */

static void merge_place(gd_merge_slot *slots, size_t cap, gd_merge_slot m)
{
    size_t mask = cap - 1;
    size_t i = gd_hash_u64(m.key) & mask;
    while (slots[i].key != UINT64_MAX) i = (i + 1) & mask;
    slots[i] = m;
}

gd_status gd_bpe_add_merge(gd_tokenizer *t, int32_t a, int32_t b, int32_t c, char *why, size_t cap)
{
    int32_t ids[3] = {a, b, c};
    for (int k = 0; k < 3; k++)
        if (ids[k] < 0 || ids[k] >= t->n_ids || !(t->flags[ids[k]] & GD_TOK_MODEL)) {
            snprintf(why, cap, "merge %ld uses id %ld, which is not in the vocabulary", (long)t->n_merges,
                     (long)ids[k]);
            return GD_ERR_INVALID;
        }
    if (t->n_merges == t->cap_merges) {
        int32_t ncap = t->cap_merges ? t->cap_merges * 2 : 1024;
        if (ncap > GD_BPE_MAX_ID) ncap = GD_BPE_MAX_ID;
        if (ncap == t->n_merges) {
            snprintf(why, cap, "more than %d merges", GD_BPE_MAX_ID);
            return GD_ERR_INVALID;
        }
        int32_t(*list)[2] = gd_realloc(t->merge_list, (size_t)ncap * sizeof *list);
        if (list == NULL) return GD_ERR_NOMEM;
        t->merge_list = list;
        t->cap_merges = ncap;
    }
    if ((t->n_merge_slots + 1) * 2 > t->merge_cap) {
        size_t ncap = t->merge_cap * 2;
        gd_merge_slot *slots = gd_malloc(ncap * sizeof *slots);
        if (slots == NULL) return GD_ERR_NOMEM;
        for (size_t i = 0; i < ncap; i++) slots[i].key = UINT64_MAX;
        for (size_t i = 0; i < t->merge_cap; i++)
            if (t->merges[i].key != UINT64_MAX) merge_place(slots, ncap, t->merges[i]);
        gd_free(t->merges);
        t->merges = slots;
        t->merge_cap = ncap;
    }
    int32_t rank = t->n_merges;
    t->merge_list[t->n_merges][0] = a;
    t->merge_list[t->n_merges][1] = b;
    t->n_merges++;
    /* A pair listed twice keeps its later rank, as `tokenizers` does. */
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = t->merge_cap - 1;
    for (size_t i = gd_hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (t->merges[i].key == key) {
            t->merges[i].rank = rank;
            t->merges[i].id = c;
            return GD_OK;
        }
        if (t->merges[i].key == UINT64_MAX) break;
    }
    merge_place(t->merges, t->merge_cap, (gd_merge_slot){key, rank, c});
    t->n_merge_slots++;
    return GD_OK;
}

/* ---- added tokens ---------------------------------------------------------------------- */

gd_status gd_bpe_add_added(gd_tokenizer *t, int32_t id, int lstrip, int rstrip, int normalized, int special)
{
    if (t->n_added == t->cap_added) {
        int ncap = t->cap_added ? t->cap_added * 2 : 8;
        gd_added_token *a = gd_realloc(t->added, (size_t)ncap * sizeof *a);
        if (a == NULL) return GD_ERR_NOMEM;
        t->added = a;
        t->cap_added = ncap;
    }
    t->added[t->n_added++] = (gd_added_token){.id = id, .len = t->len[id], .bytes = NULL,
                                              .lstrip = (uint8_t)(lstrip != 0), .rstrip = (uint8_t)(rstrip != 0),
                                              .normalized = (uint8_t)(normalized != 0),
                                              .special = (uint8_t)(special != 0)};
    t->flags[id] |= GD_TOK_ADDED | (special ? GD_TOK_SPECIAL : 0);
    return GD_OK;
}

/* Longest first, so that the first match at a position is the longest one. */
static int by_length_desc(const void *pa, const void *pb)
{
    const gd_added_token *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

gd_status gd_bpe_finish(gd_tokenizer *t, char *why, size_t cap)
{
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            snprintf(why, cap,
                     "the vocabulary has no token for byte 0x%02X (a byte-level BPE vocabulary has all 256)", b);
            return GD_ERR_INVALID;
        }
    memset(t->added_first, 0, sizeof t->added_first);
    int kept = 0;
    for (int i = 0; i < t->n_added; i++) {
        gd_added_token *a = &t->added[i];
        a->bytes = t->pool + t->off[a->id];
        a->len = t->len[a->id];
        if (a->len == 0) continue; /* an empty token matches nothing */
        t->added_first[a->bytes[0]] = 1;
        t->added[kept++] = *a;
    }
    t->n_added = kept;
    if (kept > 1) qsort(t->added, (size_t)kept, sizeof *t->added, by_length_desc);
    /* The end-of-document marker: the names base models use for it, in order of
     * preference (a chat model's turn end last). */
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<|eot_id|>"};
    t->eos = -1;
    for (size_t k = 0; k < sizeof names / sizeof *names && t->eos < 0; k++)
        for (int i = 0; i < t->n_added; i++)
            if (t->added[i].len == strlen(names[k]) && memcmp(t->added[i].bytes, names[k], t->added[i].len) == 0) {
                t->eos = t->added[i].id;
                break;
            }
    return GD_OK;
}
