/* pretok.h — the pre-tokenizers of byte-level BPE: text is cut into pieces (words,
 * numbers, punctuation, spaces) before merging, so tokens never cross those. Each known
 * regex of a tokenizer.json is a hand-written matcher that gives the same pieces as the
 * regex engine of `tokenizers` (leftmost alternative first, greedy, with backtracking
 * worked out by hand); a pattern that is not one of these is refused when loading. */
#ifndef GD_PRETOK_H
#define GD_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef enum gd_pretok_kind {
    GD_PRETOK_NONE = 0, /* no split: the whole text is one piece */
    GD_PRETOK_GPT2,     /* GPT-2's ByteLevel regex */
    GD_PRETOK_LLAMA3,   /* Llama 3: numbers in groups of up to three digits */
    GD_PRETOK_QWEN2,    /* Qwen2/Qwen3: Llama 3's pattern with single digits */
    GD_PRETOK_COUNT
} gd_pretok_kind;

/* The regex each kind implements, as a tokenizer.json spells it (NULL for NONE). */
const char *gd_pretok_pattern(gd_pretok_kind k);
/* The kind whose pattern is `pattern`, or -1 when none is. */
int gd_pretok_from_pattern(const char *pattern, size_t len);

/* The end of the piece that starts at s[p] (p < n): always > p. */
size_t gd_pretok_next(gd_pretok_kind k, const uint8_t *s, size_t n, size_t p);

#endif
