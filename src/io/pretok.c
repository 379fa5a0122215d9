/* pretok.c — see pretok.h. The patterns, read as the regex engine reads them:
 *
 * GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Qwen2: \p{N} alone)
 *
 * A match is looked for at the end of the previous one, and every character starts some
 * alternative, so the pieces tile the text. The whitespace alternatives need care:
 * `\s+(?!\S)` on a run of spaces followed by a non-space backtracks by one character (the
 * last space then goes with the next word), so it takes the run less its last character,
 * or the whole run at the end of the text, and fails on a run of one, which `\s+` then
 * takes. `\s*[\r\n]+` takes a run up to and including its last line break. Characters
 * are classified as unicode.h says; a byte that is not valid UTF-8 is a character of no
 * class (so it goes with punctuation), which keeps any input encodable. */
#include "pretok.h"

#include "unicode.h"

#include <string.h>

static const char *const patterns[GD_PRETOK_COUNT] = {
    NULL,
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

const char *gd_pretok_pattern(gd_pretok_kind k)
{
    return (int)k >= 0 && k < GD_PRETOK_COUNT ? patterns[k] : NULL;
}

int gd_pretok_from_pattern(const char *pattern, size_t len)
{
    for (int k = 1; k < GD_PRETOK_COUNT; k++)
        if (strlen(patterns[k]) == len && memcmp(patterns[k], pattern, len) == 0) return k;
    return -1;
}

/* The class of the character at s[p] and its length. */
static inline size_t char_at(const uint8_t *s, size_t n, size_t p, int *cls)
{
    if (s[p] < 0x80) {
        *cls = gd_uc_latin1[s[p]];
        return 1;
    }
    uint32_t cp;
    size_t len = gd_utf8_next(s + p, n - p, &cp);
    *cls = cp == 0xFFFFFFFFu ? 0 : gd_uc_class(cp);
    return len;
}

/* The end of the run of characters of class `cls` starting at p. */
static inline size_t run_of(const uint8_t *s, size_t n, size_t p, int cls)
{
    while (p < n) {
        int c;
        size_t len = char_at(s, n, p, &c);
        if (c != cls) break;
        p += len;
    }
    return p;
}

/* The class of the character at p, or -1 at the end. */
static inline int class_at(const uint8_t *s, size_t n, size_t p)
{
    if (p >= n) return -1;
    int c;
    char_at(s, n, p, &c);
    return c;
}

/* The contractions: 's 't 'm 'd (2 bytes) and 're 've 'll (3); with `fold`, letters in
 * either case, and U+017F (long s), which case folding makes an s. 0 when none. */
static size_t contraction(const uint8_t *s, size_t n, size_t p, int fold)
{
    if (p + 1 >= n) return 0;
    uint8_t a = s[p + 1];
    if (fold) {
        if (a == 0xC5 && p + 2 < n && s[p + 2] == 0xBF) return 3;
        if (a >= 'A' && a <= 'Z') a = (uint8_t)(a + 32);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (p + 2 >= n) return 0;
    uint8_t b = s[p + 2];
    if (fold && b >= 'A' && b <= 'Z') b = (uint8_t)(b + 32);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* A run of whitespace starting at p (whose first character is whitespace): where
 * `\s+(?!\S)|\s+` ends it. */
static size_t space_run(const uint8_t *s, size_t n, size_t p)
{
    size_t e = p, last = p;
    int chars = 0;
    while (e < n) {
        int c;
        size_t len = char_at(s, n, e, &c);
        if (c != GD_UC_S) break;
        last = e;
        e += len;
        chars++;
    }
    if (e == n || chars < 2) return e;
    return last;
}

static size_t next_gpt2(const uint8_t *s, size_t n, size_t p)
{
    if (s[p] == '\'') {
        size_t k = contraction(s, n, p, 0);
        if (k) return p + k;
    }
    int c0;
    size_t len0 = char_at(s, n, p, &c0);
    if (s[p] == ' ' && p + 1 < n) {
        int c1 = class_at(s, n, p + 1);
        if (c1 != GD_UC_S) return run_of(s, n, p + 1, c1); /* " ?" then letters, digits or other */
    }
    if (c0 != GD_UC_S) return run_of(s, n, p + len0, c0);
    return space_run(s, n, p);
}

static size_t next_llama(const uint8_t *s, size_t n, size_t p, int max_digits)
{
    if (s[p] == '\'') {
        size_t k = contraction(s, n, p, 1);
        if (k) return p + k;
    }
    int c0;
    size_t len0 = char_at(s, n, p, &c0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 == GD_UC_L) return run_of(s, n, p + len0, GD_UC_L);
    if (c0 != GD_UC_N && s[p] != '\r' && s[p] != '\n' && class_at(s, n, p + len0) == GD_UC_L)
        return run_of(s, n, p + len0, GD_UC_L);
    /* \p{N}{1,k} */
    if (c0 == GD_UC_N) {
        size_t e = p + len0;
        for (int d = 1; d < max_digits && e < n; d++) {
            int c;
            size_t len = char_at(s, n, e, &c);
            if (c != GD_UC_N) break;
            e += len;
        }
        return e;
    }
    /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
    size_t q = p;
    if (s[p] == ' ' && class_at(s, n, p + 1) == 0) q = p + 1;
    if (q > p || c0 == 0) {
        size_t e = run_of(s, n, q, 0);
        while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
        return e;
    }
    /* whitespace: `\s*[\r\n]+` up to the run's last line break, else as GPT-2 */
    size_t e = p, last_nl = 0;
    int has_nl = 0;
    while (e < n) {
        int c;
        size_t len = char_at(s, n, e, &c);
        if (c != GD_UC_S) break;
        if (s[e] == '\r' || s[e] == '\n') {
            last_nl = e;
            has_nl = 1;
        }
        e += len;
    }
    if (has_nl) return last_nl + 1;
    return space_run(s, n, p);
}

size_t gd_pretok_next(gd_pretok_kind k, const uint8_t *s, size_t n, size_t p)
{
    switch (k) {
    case GD_PRETOK_GPT2: return next_gpt2(s, n, p);
    case GD_PRETOK_LLAMA3: return next_llama(s, n, p, 3);
    case GD_PRETOK_QWEN2: return next_llama(s, n, p, 1);
    default: return n;
    }
}
