/* unicode_nfc.c — see unicode_nfc.h; the tables are generated (tools/gen_unicode.py). */
#include "unicode_nfc.h"

#include "alloc.h"
#include "checked.h"

#include <string.h>

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28 };
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)
/* A byte that is not valid UTF-8, carried through as itself. */
#define RAW_BYTE 0x80000000u

static int in_ranges(const gd_uc_range *r, int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (cp < r[mid].lo)
            hi = mid - 1;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return (int)r[mid].cls;
    }
    return 0;
}

static int ccc(uint32_t cp) { return cp < 0x300 || cp >= RAW_BYTE ? 0 : in_ranges(gd_nfc_ccc, gd_nfc_nccc, cp); }

int gd_nfc_quick(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += gd_utf8_next(s + i, n - i, &cp);
        if (cp != 0xFFFFFFFFu && cp >= 0x300 && in_ranges(gd_nfc_unsafe, gd_nfc_nunsafe, cp)) return 0;
    }
    return 1;
}

static const gd_nfc_decomp *find_decomp(uint32_t cp)
{
    int lo = 0, hi = gd_nfc_ndecomps - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (cp < gd_nfc_decomps[mid].cp)
            hi = mid - 1;
        else if (cp > gd_nfc_decomps[mid].cp)
            lo = mid + 1;
        else
            return &gd_nfc_decomps[mid];
    }
    return NULL;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    int lo = 0, hi = gd_nfc_npairs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        const gd_nfc_pair *p = &gd_nfc_pairs[mid];
        if (a < p->first || (a == p->first && b < p->second))
            hi = mid - 1;
        else if (a > p->first || b > p->second)
            lo = mid + 1;
        else
            return p->composite;
    }
    return 0;
}

uint8_t *gd_nfc(const uint8_t *s, size_t n, size_t *out_n)
{
    /* no character decomposes into more than 4 code points (tools/gen_unicode.py's pool) */
    size_t cap, bytes;
    if (gd_mul_size(n, 4, &cap) != 0 || gd_mul_size(cap, sizeof(uint32_t), &bytes) != 0) return NULL;
    uint32_t *d = gd_malloc(bytes > 0 ? bytes : 1);
    if (d == NULL) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = gd_utf8_next(s + i, n - i, &cp);
        if (cp == 0xFFFFFFFFu) {
            d[m++] = RAW_BYTE | s[i];
        } else if (cp >= SBASE && cp < SBASE + SCOUNT) {
            uint32_t k = cp - SBASE;
            d[m++] = LBASE + k / NCOUNT;
            d[m++] = VBASE + (k % NCOUNT) / TCOUNT;
            if (k % TCOUNT) d[m++] = TBASE + k % TCOUNT;
        } else {
            const gd_nfc_decomp *e = cp >= 0xC0 ? find_decomp(cp) : NULL;
            if (e != NULL) {
                memcpy(d + m, gd_nfc_pool + e->off, e->len * sizeof *d);
                m += e->len;
            } else {
                d[m++] = cp;
            }
        }
        i += len;
    }
    /* canonical order: a stable sort of each run of combining marks by class */
    for (size_t i = 1; i < m; i++) {
        int c = ccc(d[i]);
        if (c == 0) continue;
        size_t j = i;
        uint32_t x = d[i];
        while (j > 0 && ccc(d[j - 1]) > c) {
            d[j] = d[j - 1];
            j--;
        }
        d[j] = x;
    }
    /* composition: each character joins the last starter unless something between them
     * blocks it (a starter, or a mark of the same or a higher class) */
    size_t k = 0, starter = SIZE_MAX;
    int last_ccc = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t x = d[i];
        int c = ccc(x);
        if (starter != SIZE_MAX && x < RAW_BYTE && d[starter] < RAW_BYTE &&
            (k == starter + 1 || (last_ccc != 0 && last_ccc < c))) {
            uint32_t comp = compose(d[starter], x);
            if (comp != 0) {
                d[starter] = comp;
                continue;
            }
        }
        if (c == 0) starter = k;
        last_ccc = c;
        d[k++] = x;
    }
    uint8_t *out = gd_malloc(n + 1 > k * 4 ? n + 1 : k * 4);
    if (out == NULL) {
        gd_free(d);
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < k; i++) {
        if (d[i] >= RAW_BYTE) out[o++] = (uint8_t)d[i];
        else o += gd_utf8_put(d[i], out + o);
    }
    gd_free(d);
    *out_n = o;
    return out;
}
