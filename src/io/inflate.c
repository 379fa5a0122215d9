/* inflate.c — DEFLATE (RFC 1951) and gzip (RFC 1952) decoding.
 *
 * The decoder keeps up to 64 bits of input in a buffer, least significant bit first as
 * DEFLATE packs them. Huffman codes decode through one lookup table per code, indexed by
 * the next `bits` input bits (bits = the longest code length, at most 15): every entry
 * whose low `len` bits equal a code's bit-reversed value holds that code's symbol. A
 * table is rebuilt for each dynamic block; at 2^15 entries that is cheap next to the
 * tens of kilobytes a block decodes to.
 *
 * Everything that can be wrong with a stream is checked: block types, code lengths that
 * over-subscribe the code space or leave it incomplete, codes that are not in the table,
 * distances reaching before the start of the output, stored-block length complements, a
 * stream that ends early, and for gzip the header fields, the CRC-32 and the length in
 * the trailer.
 *
 * Output is bounded: the caller says how much it accepts, and decoding stops the moment
 * a stream produces more, rather than after inflating a small hostile file to gigabytes. */
#include "inflate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXBITS 15
#define MAXLCODES 288   /* literal/length symbols, including the 2 the fixed code reserves */
#define MAXDCODES 32    /* distance symbols, including 2 reserved */

typedef struct inflate_state {
    const uint8_t *in;
    size_t n, pos;          /* input and the next byte to load into bitbuf */
    uint64_t bitbuf;
    int bitcnt;
    uint8_t *out;
    size_t out_n, out_cap;
    size_t limit;           /* out_n may not pass this */
    int over;               /* the stream produced more than limit */
    size_t start;           /* out_n when this stream began: distances may not reach before */
    char *err;
    size_t err_cap;
    /* Entries: symbol << 4 | code length; 0 where no code has those bits. */
    uint16_t lit[1 << MAXBITS], dist[1 << MAXBITS], lens[1 << 7];
    int lit_bits, dist_bits, lens_bits;
} inflate_state;

static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,
                                       33,  49,  65,  97,  129, 193,  257,  385,  513,  769,
                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
/* The order in which a dynamic block sends the lengths of the code-length code. */
static const uint8_t clen_order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

static gd_status fail(char *err, size_t cap, gd_status st, const char *fmt, ...)
{
    if (err != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

#define FAIL(s, ...) fail((s)->err, (s)->err_cap, GD_ERR_FORMAT, __VA_ARGS__)
#define TRUNCATED(s) FAIL(s, "deflate stream is truncated (input ends inside a block at byte %zu)", (s)->n)

static void refill(inflate_state *s)
{
    while (s->bitcnt <= 56 && s->pos < s->n) {
        s->bitbuf |= (uint64_t)s->in[s->pos++] << s->bitcnt;
        s->bitcnt += 8;
    }
}

/* Takes `need` (<= 32) bits into *v; -1 when the input ends first. */
static int getbits(inflate_state *s, int need, uint32_t *v)
{
    if (s->bitcnt < need) {
        refill(s);
        if (s->bitcnt < need) return -1;
    }
    *v = (uint32_t)(s->bitbuf & ((1ull << need) - 1));
    s->bitbuf >>= need;
    s->bitcnt -= need;
    return 0;
}

/* Next symbol of a code: >= 0, or -1 when the input ends, -2 for bits that are no code. */
static int decode(inflate_state *s, const uint16_t *table, int bits)
{
    if (s->bitcnt < bits) refill(s);
    uint16_t e = table[s->bitbuf & ((1u << bits) - 1)];
    int len = e & 15;
    if (len == 0) return s->bitcnt < bits ? -1 : -2;
    if (len > s->bitcnt) return -1;
    s->bitbuf >>= len;
    s->bitcnt -= len;
    return e >> 4;
}

/* Canonical Huffman code (RFC 1951 3.2.2) from code lengths into a lookup table.
 * `lone`: a single code of one bit may stand alone (literal/length and distance codes). */
static gd_status build(inflate_state *s, uint16_t *table, int *bits_out, const uint8_t *lengths, int n, int lone,
                       const char *what)
{
    int count[MAXBITS + 1] = {0};
    for (int i = 0; i < n; i++) count[lengths[i]]++;
    count[0] = 0;
    /* An over-subscribed code has more codes of some length than the shorter ones leave
     * room for; an incomplete one leaves bit patterns that are no code. zlib, which wrote
     * nearly every gzip file there is, refuses both, except a code with no symbols at all
     * (nothing may be decoded with it) and, where `lone`, one symbol of one bit, which the
     * RFC describes for a block with a single distance. Accepting more would make files
     * that this decoder reads and zlib does not. */
    int left = 1, maxlen = 0;
    for (int len = 1; len <= MAXBITS; len++) {
        left = (left << 1) - count[len];
        if (left < 0) return FAIL(s, "bad %s code: code lengths over-subscribe the code space", what);
        if (count[len]) maxlen = len;
    }
    if (left > 0 && maxlen > 0 && !(lone && maxlen == 1))
        return FAIL(s, "bad %s code: code lengths leave the code incomplete", what);
    uint32_t next[MAXBITS + 1];
    uint32_t code = 0;
    next[0] = 0;
    for (int len = 1; len <= MAXBITS; len++) {
        code = (code + (uint32_t)count[len - 1]) << 1;
        next[len] = code;
    }
    int bits = maxlen > 0 ? maxlen : 1;
    memset(table, 0, sizeof(uint16_t) << bits);
    for (int sym = 0; sym < n; sym++) {
        int len = lengths[sym];
        if (len == 0) continue;
        uint32_t c = next[len]++, rev = 0;
        for (int b = 0; b < len; b++) rev |= ((c >> b) & 1u) << (len - 1 - b);
        for (uint32_t i = rev; i < (1u << bits); i += 1u << len) table[i] = (uint16_t)(sym << 4 | len);
    }
    *bits_out = bits;
    return GD_OK;
}

static gd_status reserve(inflate_state *s, size_t extra)
{
    if (s->out_cap - s->out_n >= extra) return GD_OK;
    size_t cap = s->out_cap ? s->out_cap : 4096;
    while (cap - s->out_n < extra) {
        if (cap > SIZE_MAX / 2) return fail(s->err, s->err_cap, GD_ERR_NOMEM, "inflate: output too large");
        cap *= 2;
    }
    uint8_t *p = realloc(s->out, cap);
    if (p == NULL) return fail(s->err, s->err_cap, GD_ERR_NOMEM, "inflate: out of memory growing output to %zu bytes", cap);
    s->out = p;
    s->out_cap = cap;
    return GD_OK;
}

static gd_status too_big(inflate_state *s)
{
    s->over = 1;
    return FAIL(s, "data decompresses to more than %zu bytes", s->limit);
}

/* Makes room for up to *take more output bytes, lowering *take to what the limit lets
 * through; the caller writes those and then reports too_big() if it wanted more. */
static gd_status room(inflate_state *s, size_t *take)
{
    if (*take > s->limit - s->out_n) *take = s->limit - s->out_n;
    return reserve(s, *take);
}

static gd_status stored(inflate_state *s)
{
    /* A stored block starts at a byte boundary: drop the partial byte, then hand the
     * whole bytes still in the bit buffer back to the input. */
    s->bitbuf >>= s->bitcnt & 7;
    s->bitcnt -= s->bitcnt & 7;
    s->pos -= (size_t)(s->bitcnt / 8);
    s->bitbuf = 0;
    s->bitcnt = 0;
    if (s->n - s->pos < 4) return TRUNCATED(s);
    const uint8_t *p = s->in + s->pos;
    unsigned len = p[0] | (unsigned)p[1] << 8, nlen = p[2] | (unsigned)p[3] << 8;
    if (len != (~nlen & 0xffffu))
        return FAIL(s, "bad stored block at byte %zu: length %u does not match its complement %u", s->pos, len, nlen);
    s->pos += 4;
    if (s->n - s->pos < len) return TRUNCATED(s);
    size_t take = len;
    gd_status st = room(s, &take);
    if (st != GD_OK) return st;
    if (take > 0) memcpy(s->out + s->out_n, s->in + s->pos, take);
    s->out_n += take;
    s->pos += len;
    return take < len ? too_big(s) : GD_OK;
}

/* Literals and length/distance pairs until the end-of-block symbol. */
static gd_status codes(inflate_state *s)
{
    for (;;) {
        int sym = decode(s, s->lit, s->lit_bits);
        if (sym == -1) return TRUNCATED(s);
        if (sym == -2) return FAIL(s, "invalid literal/length code near byte %zu", s->pos);
        if (sym < 256) {
            if (s->out_n == s->out_cap || s->out_n == s->limit) {
                size_t take = 1;
                if (room(s, &take) != GD_OK) return GD_ERR_NOMEM;
                if (take == 0) return too_big(s);
            }
            s->out[s->out_n++] = (uint8_t)sym;
            continue;
        }
        if (sym == 256) return GD_OK;
        sym -= 257;
        if (sym >= 29) return FAIL(s, "invalid length symbol %d near byte %zu", sym + 257, s->pos);
        uint32_t extra;
        if (getbits(s, len_extra[sym], &extra)) return TRUNCATED(s);
        size_t len = len_base[sym] + extra;
        int dsym = decode(s, s->dist, s->dist_bits);
        if (dsym == -1) return TRUNCATED(s);
        if (dsym == -2 || dsym >= 30) return FAIL(s, "invalid distance code near byte %zu", s->pos);
        if (getbits(s, dist_extra[dsym], &extra)) return TRUNCATED(s);
        size_t dist = dist_base[dsym] + extra;
        if (dist > s->out_n - s->start)
            return FAIL(s, "distance %zu reaches before the start of the output (%zu bytes so far)", dist,
                        s->out_n - s->start);
        size_t take = len;
        gd_status st = room(s, &take);
        if (st != GD_OK) return st;
        if (take == 0) return too_big(s);
        /* Byte by byte: a copy may overlap the bytes it is producing (runs). */
        uint8_t *o = s->out + s->out_n;
        for (size_t i = 0; i < take; i++) o[i] = o[(ptrdiff_t)i - (ptrdiff_t)dist];
        s->out_n += take;
        if (take < len) return too_big(s);
    }
}

static gd_status fixed(inflate_state *s)
{
    uint8_t l[MAXLCODES + MAXDCODES];
    int i = 0;
    for (; i < 144; i++) l[i] = 8;
    for (; i < 256; i++) l[i] = 9;
    for (; i < 280; i++) l[i] = 7;
    for (; i < MAXLCODES; i++) l[i] = 8;
    for (; i < MAXLCODES + MAXDCODES; i++) l[i] = 5;
    gd_status st = build(s, s->lit, &s->lit_bits, l, MAXLCODES, 0, "fixed literal/length");
    if (st == GD_OK) st = build(s, s->dist, &s->dist_bits, l + MAXLCODES, MAXDCODES, 0, "fixed distance");
    return st != GD_OK ? st : codes(s);
}

static gd_status dynamic(inflate_state *s)
{
    uint32_t nlen, ndist, ncode, v;
    if (getbits(s, 5, &nlen) || getbits(s, 5, &ndist) || getbits(s, 4, &ncode)) return TRUNCATED(s);
    nlen += 257;
    ndist += 1;
    ncode += 4;
    if (nlen > 286 || ndist > 30)
        return FAIL(s, "bad dynamic block header: %u literal/length and %u distance codes (max 286, 30)", nlen, ndist);
    uint8_t l[MAXLCODES + MAXDCODES] = {0};
    for (uint32_t i = 0; i < ncode; i++) {
        if (getbits(s, 3, &v)) return TRUNCATED(s);
        l[clen_order[i]] = (uint8_t)v;
    }
    gd_status st = build(s, s->lens, &s->lens_bits, l, 19, 0, "code-length");
    if (st != GD_OK) return st;
    memset(l, 0, sizeof l);
    uint32_t index = 0;
    while (index < nlen + ndist) {
        int sym = decode(s, s->lens, s->lens_bits);
        if (sym == -1) return TRUNCATED(s);
        if (sym == -2) return FAIL(s, "invalid code-length code near byte %zu", s->pos);
        if (sym < 16) {
            l[index++] = (uint8_t)sym;
            continue;
        }
        uint8_t val = 0;
        uint32_t rep;
        if (sym == 16) {
            if (index == 0) return FAIL(s, "bad dynamic block: repeat of a code length before any length");
            val = l[index - 1];
            if (getbits(s, 2, &rep)) return TRUNCATED(s);
            rep += 3;
        } else if (sym == 17) {
            if (getbits(s, 3, &rep)) return TRUNCATED(s);
            rep += 3;
        } else {
            if (getbits(s, 7, &rep)) return TRUNCATED(s);
            rep += 11;
        }
        if (index + rep > nlen + ndist)
            return FAIL(s, "bad dynamic block: code length repeats run past the %u lengths", nlen + ndist);
        while (rep--) l[index++] = val;
    }
    if (l[256] == 0) return FAIL(s, "bad dynamic block: no code for end-of-block");
    st = build(s, s->lit, &s->lit_bits, l, (int)nlen, 1, "literal/length");
    if (st == GD_OK) st = build(s, s->dist, &s->dist_bits, l + nlen, (int)ndist, 1, "distance");
    return st != GD_OK ? st : codes(s);
}

/* gd_inflate, also saying whether the limit is what stopped it. */
static gd_status inflate_run(const uint8_t *in, size_t n, size_t max_out, size_t *consumed, uint8_t **out,
                             size_t *out_n, size_t *out_cap, int *over, char *err, size_t err_cap)
{
    *over = 0;
    /* The tables make the state 130 KB: too much for some thread stacks. */
    inflate_state *s = malloc(sizeof *s);
    if (s == NULL) return fail(err, err_cap, GD_ERR_NOMEM, "inflate: out of memory");
    s->in = in;
    s->n = n;
    s->pos = 0;
    s->bitbuf = 0;
    s->bitcnt = 0;
    s->out = *out;
    s->out_n = *out_n;
    s->out_cap = *out_cap;
    s->limit = max_out > *out_n ? max_out : *out_n;
    s->over = 0;
    s->start = *out_n;
    s->err = err;
    s->err_cap = err_cap;
    gd_status st = GD_OK;
    uint32_t last = 0, type;
    while (st == GD_OK && !last) {
        if (getbits(s, 1, &last) || getbits(s, 2, &type)) {
            st = TRUNCATED(s);
            break;
        }
        if (type == 0) st = stored(s);
        else if (type == 1) st = fixed(s);
        else if (type == 2) st = dynamic(s);
        else st = FAIL(s, "invalid block type 3 near byte %zu", s->pos);
    }
    if (consumed != NULL) *consumed = s->pos - (size_t)(s->bitcnt / 8);
    *out = s->out;
    *out_n = s->out_n;
    *out_cap = s->out_cap;
    *over = s->over;
    free(s);
    return st;
}

gd_status gd_inflate(const uint8_t *in, size_t n, size_t max_out, size_t *consumed, uint8_t **out,
                     size_t *out_n, size_t *out_cap, char *err, size_t err_cap)
{
    int over;
    return inflate_run(in, n, max_out, consumed, out, out_n, out_cap, &over, err, err_cap);
}

uint32_t gd_crc32(uint32_t crc, const void *data, size_t n)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

int gd_is_gzip(const uint8_t *p, size_t n)
{
    return n >= 2 && p[0] == 0x1f && p[1] == 0x8b;
}

static uint32_t le32(const uint8_t *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Index just past the zero that ends the string at in[p], or 0 when there is none. */
static size_t skip_string(const uint8_t *in, size_t n, size_t p)
{
    const uint8_t *z = memchr(in + p, 0, n - p);
    return z == NULL ? 0 : (size_t)(z - in) + 1;
}

/* gd_gunzip and gd_gunzip_head: with `head`, reaching max_out ends decoding without an
 * error and leaves the first max_out bytes in *out. */
static gd_status gunzip(const uint8_t *in, size_t n, size_t max_out, int head, uint8_t **out, size_t *out_n,
                        char *err, size_t err_cap)
{
    enum { FTEXT = 1, FHCRC = 2, FEXTRA = 4, FNAME = 8, FCOMMENT = 16 };
    uint8_t *buf = NULL;
    size_t used = 0, cap = 0, pos = 0;
    gd_status st = GD_OK;
    *out = NULL;
    *out_n = 0;
    /* The last member's ISIZE is the whole size for the usual single-member file; take it
     * as a first guess at the capacity, bounded by the most DEFLATE can expand (1032:1)
     * and by what the caller accepts. */
    if (n >= 18) {
        size_t hint = le32(in + n - 4);
        if (hint > max_out) hint = max_out;
        if (hint > 0 && hint / 1032 <= n) {
            buf = malloc(hint);
            cap = buf != NULL ? hint : 0;
        }
    }
    for (int member = 0;; member++) {
        if (n - pos < 2 || !gd_is_gzip(in + pos, n - pos)) {
            if (member == 0) st = fail(err, err_cap, GD_ERR_FORMAT, "not a gzip file (no 1f 8b magic)");
            else st = fail(err, err_cap, GD_ERR_FORMAT, "%zu bytes of trailing garbage after gzip member %d", n - pos, member);
            break;
        }
        if (n - pos < 18) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "gzip member %d is truncated: %zu bytes, a header and trailer need 18",
                      member, n - pos);
            break;
        }
        const uint8_t *h = in + pos;
        if (h[2] != 8) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "bad gzip header: compression method %d (only 8, deflate, exists)", h[2]);
            break;
        }
        if (h[3] & 0xe0) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "bad gzip header: reserved flag bits set (flags 0x%02x)", h[3]);
            break;
        }
        size_t p = pos + 10;
        if (h[3] & FEXTRA) {
            size_t xlen = n - p >= 2 ? (size_t)(in[p] | in[p + 1] << 8) : 0;
            if (n - p < 2 || n - p - 2 < xlen) {
                st = fail(err, err_cap, GD_ERR_FORMAT, "gzip header is truncated (extra field)");
                break;
            }
            p += 2 + xlen;
        }
        if ((h[3] & FNAME) && (p = skip_string(in, n, p)) == 0) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "gzip header is truncated (file name not terminated)");
            break;
        }
        if ((h[3] & FCOMMENT) && (p = skip_string(in, n, p)) == 0) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "gzip header is truncated (comment not terminated)");
            break;
        }
        if (h[3] & FHCRC) {
            if (n - p < 2) {
                st = fail(err, err_cap, GD_ERR_FORMAT, "gzip header is truncated (header CRC)");
                break;
            }
            uint32_t want = in[p] | (uint32_t)in[p + 1] << 8, got = gd_crc32(0, h, p - pos) & 0xffffu;
            if (want != got) {
                st = fail(err, err_cap, GD_ERR_FORMAT, "gzip header CRC mismatch: stored 0x%04x, computed 0x%04x", want, got);
                break;
            }
            p += 2;
        }
        size_t begin = used, consumed = 0;
        int over;
        st = inflate_run(in + p, n - p, max_out, &consumed, &buf, &used, &cap, &over, err, err_cap);
        if (over && head) {
            st = GD_OK;
            break;
        }
        if (over) used = max_out + 1; /* "more than max_out" for the caller (over implies max_out < SIZE_MAX) */
        if (st != GD_OK) break;
        p += consumed;
        if (n - p < 8) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "gzip member %d is truncated: %zu of the 8 trailer bytes (CRC32, ISIZE)",
                      member, n - p);
            break;
        }
        uint32_t crc = le32(in + p), isize = le32(in + p + 4);
        /* An empty first member leaves buf NULL, and NULL + 0 is undefined. */
        uint32_t got = used > begin ? gd_crc32(0, buf + begin, used - begin) : 0;
        if (crc != got) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "gzip CRC32 mismatch: trailer says 0x%08x, data gives 0x%08x", crc, got);
            break;
        }
        if (isize != (uint32_t)(used - begin)) {
            st = fail(err, err_cap, GD_ERR_FORMAT, "gzip ISIZE mismatch: trailer says %u bytes, data has %zu", isize,
                      used - begin);
            break;
        }
        pos = p + 8;
        if (pos == n) break;
    }
    if (st != GD_OK) {
        free(buf);
        *out_n = used;
        return st;
    }
    *out = buf;
    *out_n = used;
    return GD_OK;
}

gd_status gd_gunzip(const uint8_t *in, size_t n, size_t max_out, uint8_t **out, size_t *out_n, char *err,
                    size_t err_cap)
{
    return gunzip(in, n, max_out, 0, out, out_n, err, err_cap);
}

gd_status gd_gunzip_head(const uint8_t *in, size_t n, size_t want, uint8_t *out, size_t *got, char *err,
                         size_t err_cap)
{
    uint8_t *buf;
    gd_status st = gunzip(in, n, want, 1, &buf, got, err, err_cap);
    if (st == GD_OK && *got > 0) memcpy(out, buf, *got);
    if (st != GD_OK) *got = 0;
    free(buf);
    return st;
}
