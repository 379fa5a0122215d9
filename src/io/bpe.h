/* bpe.h — the byte-level BPE tokenizer inside gd_tokenizer (gradus_lm.h): its tables,
 * how the trainer and the tokenizer.json reader build one, and the encoder's pieces.
 *
 * A token is a byte string. The model's tokens (the 256 bytes and what merges made) are
 * found by their bytes in `vocab`; a merge (a, b) -> c has a rank, its place in the merge
 * list, and encoding applies the lowest-ranked merge available, leftmost first, until
 * none is, as `tokenizers` does. Added tokens ("<|endoftext|>", chat markers) are matched
 * in the text before pre-tokenization and never merged into. Ids may have holes: a
 * tokenizer.json need not use every id below its largest. */
#ifndef GD_BPE_H
#define GD_BPE_H

#include "gradus_lm.h"
#include "pretok.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* No tokenizer has this many ids; an id past it in a file is corrupt, not big. */
#define GD_BPE_MAX_ID (1 << 24)

enum {
    GD_TOK_MODEL = 1,   /* in the model's vocabulary (reachable by merges) */
    GD_TOK_ADDED = 2,   /* matched as a whole before pre-tokenization */
    GD_TOK_SPECIAL = 4, /* an added token marked special (control, not text) */
    GD_TOK_RAW = 8,     /* a vocabulary entry that is not byte-level text: its UTF-8 bytes,
                         * which decoding gives back but no encoding produces */
};

typedef struct gd_added_token {
    int32_t id;
    uint32_t len;
    const uint8_t *bytes; /* into the tokenizer's pool */
    uint8_t lstrip, rstrip, normalized, special;
} gd_added_token;

/* An open-addressing table of ids keyed by their bytes. */
typedef struct gd_bytemap {
    int32_t *slots; /* -1: empty */
    size_t cap;     /* a power of two */
    size_t count;
} gd_bytemap;

/* Merges keyed by the pair (a << 32 | b). */
typedef struct gd_merge_slot {
    uint64_t key; /* UINT64_MAX: empty */
    int32_t rank, id;
} gd_merge_slot;

struct gd_tokenizer {
    int32_t n_ids;     /* one past the largest id */
    int32_t cap_ids;
    uint64_t *off;     /* bytes of id i: pool[off[i] .. off[i] + len[i]) */
    uint32_t *len;
    uint8_t *flags;    /* GD_TOK_*; 0: no token has this id */
    uint8_t *pool;
    size_t pool_len, pool_cap;

    gd_bytemap vocab;  /* model tokens by their bytes */
    int32_t byte_id[256];

    gd_merge_slot *merges;
    size_t merge_cap, n_merge_slots;
    int32_t (*merge_list)[2]; /* (a, b) in rank order, for writing the file back */
    int32_t n_merges, cap_merges;

    gd_added_token *added;
    int n_added, cap_added;
    uint8_t added_first[256]; /* a byte that starts some added token */

    gd_pretok_kind pretok;
    int add_prefix_space; /* ByteLevel's option: a space before text that lacks one */
    int ignore_merges;    /* a piece that is a whole token is that token (Llama 3) */
    int nfc;              /* the normalizer: NFC (Qwen2) */
    int32_t eos;
    /* llama2.c's tokenizer.bin (tokenizer_l2c.c): each piece's merge score; NULL for a
     * byte-level BPE. Its byte tokens (<0xXX>) and control tokens are kept out of the
     * vocabulary map (flags ADDED|SPECIAL, bytes the raw byte or nothing). */
    float *sp_score;
};

/* tokenizer_l2c.c: encoding with a llama2.c tokenizer */
gd_status gd_sp_encode(gd_ctx *ctx, const gd_tokenizer *t, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids);
/* Reads llama2.c's tokenizer.bin from memory; `name` names it in messages. */
gd_status gd_tokenizer_from_l2c(gd_ctx *ctx, const char *name, const uint8_t *data, size_t n, gd_tokenizer **out);

/* ---- hashing ------------------------------------------------------------------------- */

static inline uint64_t gd_hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001B3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 31;
    h *= 0x165667B19E3779F9ull;
    return h ^ (h >> 32);
}

static inline uint64_t gd_hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 33);
}

/* ---- building (the trainer and the reader) ----------------------------------------------- */

gd_tokenizer *gd_bpe_new(void);
/* Gives `id` the bytes s[0..n) with flags GD_TOK_*; a model token also goes into the
 * vocabulary map. Returns GD_OK, GD_ERR_NOMEM, or GD_ERR_INVALID (id taken or out of
 * range, bytes already a model token), with the reason in why. */
gd_status gd_bpe_set_token(gd_tokenizer *t, int32_t id, const uint8_t *s, size_t n, int flags, char *why,
                           size_t cap);
/* Appends the merge (a, b) -> c with the next rank. */
gd_status gd_bpe_add_merge(gd_tokenizer *t, int32_t a, int32_t b, int32_t c, char *why, size_t cap);
/* Marks `id` (already set with GD_TOK_ADDED) as matched whole in text. */
gd_status gd_bpe_add_added(gd_tokenizer *t, int32_t id, int lstrip, int rstrip, int normalized, int special);
/* After the last token: checks every byte has its model token and picks the end-of-text
 * id. Returns GD_ERR_INVALID with the reason in why when a byte has none. */
gd_status gd_bpe_finish(gd_tokenizer *t, char *why, size_t cap);

/* The model token with these bytes, or -1. */
int32_t gd_bpe_lookup(const gd_tokenizer *t, const uint8_t *s, size_t n);
/* The merge of (a, b): its rank (and *c the id made), or -1. */
static inline int32_t gd_bpe_merge_rank(const gd_tokenizer *t, int32_t a, int32_t b, int32_t *c)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = t->merge_cap - 1;
    for (size_t i = gd_hash_u64(key) & mask;; i = (i + 1) & mask) {
        const gd_merge_slot *m = &t->merges[i];
        if (m->key == key) {
            *c = m->id;
            return m->rank;
        }
        if (m->key == UINT64_MAX) return -1;
    }
}

/* The bytes of id (NULL when no token has it). */
static inline const uint8_t *gd_bpe_bytes(const gd_tokenizer *t, int32_t id, size_t *n)
{
    if (id < 0 || id >= t->n_ids || t->flags[id] == 0) return NULL;
    *n = t->len[id];
    return t->pool + t->off[id];
}

/* Reads tokenizer.json text (`name` for messages): what gd_tokenizer_load does after
 * reading the file; the fuzz target calls it on bytes. */
gd_status gd_tokenizer_from_json(gd_ctx *ctx, const char *name, const char *text, size_t n, gd_tokenizer **out);

/* ---- byte-level characters ------------------------------------------------------------ */

/* GPT-2's map of bytes to printable characters, in which tokenizer.json spells tokens:
 * the printable bytes stand for themselves, the others are U+0100 upwards in order. */
uint32_t gd_bytelevel_char(uint8_t b);
/* The byte a character stands for, or -1 when it stands for none. */
int gd_bytelevel_byte(uint32_t cp);

#endif
