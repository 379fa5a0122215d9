/* fuzz_gunzip.c — libFuzzer target: the gzip decoder, checked against zlib.
 *
 * Whatever the input, gd_gunzip must not crash or touch memory it does not own (the
 * sanitizers watch), and it must agree with zlib: where zlib decodes the input as one or
 * more whole gzip members with nothing after them, gd_gunzip must succeed with the same
 * bytes; where zlib refuses it, gd_gunzip must refuse it too. gd_gunzip_head must return
 * a prefix of what gd_gunzip returns. A disagreement aborts, which libFuzzer reports
 * with the input that caused it.
 *
 * zlib is linked here only: the library decodes gzip itself so that it needs nothing but
 * a C compiler.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/gunzip.
 */
#include "inflate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Far above what DEFLATE can expand libFuzzer's inputs to; past it neither side is judged. */
#define MAX_OUT ((size_t)64 << 20)

enum { REFUSED = 0, DECODED = 1, TOO_BIG = 2 };

/* zlib inflates one gzip member per stream; members follow each other with nothing
 * between them and nothing after the last, which is what gd_gunzip accepts. */
static int zlib_gunzip(const uint8_t *in, size_t n, uint8_t **out, size_t *out_n)
{
    size_t cap = 1 << 16, used = 0, pos = 0;
    uint8_t *buf = malloc(cap);
    int verdict = DECODED;
    if (buf == NULL) abort();
    do {
        if (n - pos < 2 || in[pos] != 0x1f || in[pos + 1] != 0x8b) {
            verdict = REFUSED; /* no member, or trailing bytes that are not one */
            break;
        }
        z_stream z;
        memset(&z, 0, sizeof z);
        if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) abort(); /* gzip wrapper only */
        z.next_in = (Bytef *)(uintptr_t)(in + pos);
        z.avail_in = (uInt)(n - pos);
        int r = Z_OK;
        do {
            if (used == cap) {
                if (cap > MAX_OUT) {
                    verdict = TOO_BIG;
                    break;
                }
                cap *= 2;
                buf = realloc(buf, cap);
                if (buf == NULL) abort();
            }
            z.next_out = buf + used;
            z.avail_out = (uInt)(cap - used);
            r = inflate(&z, Z_NO_FLUSH);
            used = cap - z.avail_out;
        } while (r == Z_OK || (r == Z_BUF_ERROR && z.avail_out == 0));
        pos = n - z.avail_in;
        inflateEnd(&z);
        if (verdict == DECODED && r != Z_STREAM_END) verdict = REFUSED;
    } while (verdict == DECODED && pos < n);
    if (used > MAX_OUT) verdict = TOO_BIG;
    *out = buf;
    *out_n = used;
    return verdict;
}

static void disagree(const char *what, const char *err)
{
    fprintf(stderr, "gd_gunzip and zlib disagree: %s (gd_gunzip says: %s)\n", what, err);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *want, *got = NULL;
    size_t want_n, got_n;
    int verdict = zlib_gunzip(data, size, &want, &want_n);
    char err[512] = "";
    gd_status st = gd_gunzip(data, size, MAX_OUT, &got, &got_n, err, sizeof err);
    if (st != GD_OK && err[0] == '\0') disagree("a failure without a message", err);
    if (st != GD_OK && got != NULL) disagree("a failure that returned a buffer", err);
    if (verdict == DECODED) {
        if (st != GD_OK) disagree("zlib decodes it, gd_gunzip refuses it", err);
        if (got_n != want_n) disagree("different lengths", err);
        if (got_n > 0 && memcmp(got, want, got_n) != 0) disagree("different bytes", err);
    } else if (verdict == REFUSED) {
        if (st == GD_OK) disagree("zlib refuses it, gd_gunzip decodes it", err);
        if (got_n > MAX_OUT) disagree("zlib refuses it, gd_gunzip stops at the size bound", err);
    }
    /* The head of the file: the first bytes of the full decode whenever that succeeds. */
    if (st == GD_OK) {
        uint8_t head[64];
        size_t want_head = size % sizeof head, head_n;
        if (gd_gunzip_head(data, size, want_head, head, &head_n, err, sizeof err) != GD_OK)
            disagree("gd_gunzip_head refuses what gd_gunzip decodes", err);
        size_t expect = got_n < want_head ? got_n : want_head;
        if (head_n != expect || (expect > 0 && memcmp(head, got, expect) != 0))
            disagree("gd_gunzip_head is not the start of gd_gunzip's output", err);
    }
    free(want);
    free(got);
    return 0;
}
