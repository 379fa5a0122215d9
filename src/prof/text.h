/* text.h — text that src/prof writes into files other programs read: JSON strings must be
 * UTF-8, and XML text must be UTF-8 without control characters. Names written there come
 * from users (node labels, metric columns), so they are checked byte by byte. */
#ifndef GD_PROF_TEXT_H
#define GD_PROF_TEXT_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (n bytes left): 1 to 4, or 0 when the bytes
 * there are not UTF-8 (overlong forms, surrogates and code points past U+10FFFF are not). */
static inline size_t gd_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (len == 0 || len > n || c > 0xF4) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogates */
    if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* past U+10FFFF */
    return len;
}

#endif
