/* unicode.h — what the byte-level pre-tokenizers need to know about characters: UTF-8
 * decoding that never fails (a byte that does not start a valid sequence is a character
 * of its own, of no class) and the classes letter, number and space of the regex engine
 * `tokenizers` uses (Unicode 16.0, as its regex engine has). The tables are generated
 * (tools/gen_unicode.py). */
#ifndef GD_UNICODE_H
#define GD_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { GD_UC_L = 1, GD_UC_N = 2, GD_UC_S = 4 };

typedef struct gd_uc_range {
    uint32_t lo, hi;
    uint32_t cls;
} gd_uc_range;

extern const gd_uc_range gd_uc_ranges[];
extern const int gd_uc_nranges;
extern const char gd_unicode_version[];
/* Classes of U+0000..U+00FF, looked up directly. */
extern const uint8_t gd_uc_latin1[256];

/* The class of a code point (0 when it is none of the three). */
static inline int gd_uc_class(uint32_t cp)
{
    if (cp < 256) return gd_uc_latin1[cp];
    int lo = 0, hi = gd_uc_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (cp < gd_uc_ranges[mid].lo)
            hi = mid - 1;
        else if (cp > gd_uc_ranges[mid].hi)
            lo = mid + 1;
        else
            return (int)gd_uc_ranges[mid].cls;
    }
    return 0;
}

/* Decodes the character at s[0] (n >= 1 bytes available): its code point in *cp and its
 * length. An invalid or truncated sequence, an overlong form or a surrogate is one byte
 * long with *cp = 0xFFFFFFFF, which is of no class. */
static inline size_t gd_utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    *cp = 0xFFFFFFFFu;
    if (b < 0xC2 || b > 0xF4) return 1;
    if (b < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 1;
        *cp = (uint32_t)(b & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 1;
        uint32_t c = (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return 1;
        *cp = c;
        return 3;
    }
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 1;
    uint32_t c = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
                 (s[3] & 0x3F);
    if (c < 0x10000 || c > 0x10FFFF) return 1;
    *cp = c;
    return 4;
}

/* Encodes a code point (valid, not a surrogate) into out (4 bytes); returns its length. */
static inline size_t gd_utf8_put(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
