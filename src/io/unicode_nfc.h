/* unicode_nfc.h — NFC normalization, the normalizer of Qwen2's tokenizer. Text is almost
 * always in NFC already, which a quick check over its characters shows; only text that
 * fails it is decomposed, reordered and composed again (UAX #15).
 *
 * The tables are Unicode 9.0's, because the NFC of `tokenizers` has those: a mark
 * assigned since (U+0D3B, U+1AC6, ...) is a starter that nothing composes with there, and
 * so it is here, which keeps ids identical around such characters too. */
#ifndef GD_UNICODE_NFC_H
#define GD_UNICODE_NFC_H

#include "unicode.h"

typedef struct gd_nfc_decomp {
    uint32_t cp;
    uint16_t off, len; /* into gd_nfc_pool */
} gd_nfc_decomp;

typedef struct gd_nfc_pair {
    uint32_t first, second, composite;
} gd_nfc_pair;

extern const gd_uc_range gd_nfc_ccc[];
extern const int gd_nfc_nccc;
extern const gd_nfc_decomp gd_nfc_decomps[];
extern const int gd_nfc_ndecomps;
extern const uint32_t gd_nfc_pool[];
extern const gd_nfc_pair gd_nfc_pairs[];
extern const int gd_nfc_npairs;
extern const gd_uc_range gd_nfc_unsafe[];
extern const int gd_nfc_nunsafe;

/* 1 when s[0..n) is certainly in NFC: no character NFC changes, none that could compose
 * with the one before it, no combining marks (invalid UTF-8 bytes count as fine: they are
 * left as they are). */
int gd_nfc_quick(const uint8_t *s, size_t n);
/* s[0..n) in NFC, in a new buffer (gd_free) of *out_n bytes; bytes that are not valid
 * UTF-8 are copied as they are and block composition. NULL when out of memory. */
uint8_t *gd_nfc(const uint8_t *s, size_t n, size_t *out_n);

#endif
