/* test_idx.c — IDX datasets (plain and gzip), the gzip decoder's error checks and output
 * bound, the shapes dataset and gd_shuffle; and that loading prints nothing on stdout.
 *
 * The gzip samples: py_img_gz and py_lab_gz were made with python3's gzip module
 * (gzip.compress(data, compresslevel=9, mtime=0)) from the files idx_images()/idx_labels()
 * build below, so the test can recompute what they must decode to. The image file comes
 * out as one dynamic-Huffman block and the label file as one fixed-Huffman block; the
 * stored-block encoder here covers the third block type, multi-block streams, the FNAME
 * header field and multi-member files. */
#include "gradus_classifier.h"
#include "testutil.h"

#include "io/inflate.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef GD_BUILD_DIR
#define GD_BUILD_DIR "/tmp"
#endif

#define N 24
#define H 8
#define W 8

static const uint8_t py_img_gz[172] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xed, 0xd3, 0x31, 0x0d, 0x04, 0x41,
    0x08, 0x85, 0x61, 0x92, 0x6b, 0xb6, 0xa7, 0x39, 0x05, 0x78, 0xc0, 0xc3, 0x78, 0xc0, 0x03, 0x1e,
    0xf0, 0x80, 0x07, 0x3c, 0xe0, 0x01, 0x0f, 0x08, 0xb9, 0xcb, 0x25, 0x94, 0x9b, 0xec, 0x4e, 0x77,
    0xc9, 0x16, 0xb4, 0x5f, 0x66, 0xfe, 0xe4, 0x01, 0x1c, 0x2f, 0x00, 0x78, 0x7f, 0xef, 0xf8, 0x1d,
    0xae, 0xe0, 0xce, 0xe4, 0x65, 0xad, 0x04, 0xa0, 0x96, 0x14, 0xc2, 0x1c, 0x09, 0xd2, 0xae, 0xda,
    0xc0, 0x4e, 0x15, 0x41, 0xac, 0x25, 0xd8, 0x2d, 0x1a, 0xe8, 0x8b, 0xc8, 0xa3, 0x57, 0x99, 0x88,
    0x79, 0x71, 0xea, 0x5a, 0x59, 0xa8, 0x10, 0x66, 0x77, 0x3d, 0x24, 0xc9, 0x05, 0x55, 0x4b, 0x1c,
    0x8c, 0x11, 0xef, 0x7a, 0xf3, 0x8e, 0x6a, 0x32, 0x4c, 0xf7, 0xbb, 0xde, 0xd9, 0xbf, 0xae, 0x7a,
    0x57, 0x3b, 0x9d, 0x79, 0xbb, 0xdd, 0xc7, 0xdb, 0xed, 0x3e, 0xde, 0x6e, 0xf7, 0xf1, 0x76, 0xbb,
    0x8f, 0xb7, 0xdb, 0x7d, 0xbc, 0xdd, 0xee, 0xe3, 0xed, 0x76, 0x1f, 0xef, 0xd9, 0xcf, 0xb3, 0x9f,
    0x7f, 0xde, 0xcf, 0x07, 0x57, 0x8f, 0x5d, 0xd8, 0x10, 0x06, 0x00, 0x00,
};
static const uint8_t py_lab_gz[40] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x64, 0x60,
    0x60, 0x90, 0x60, 0x60, 0x64, 0x62, 0x66, 0x61, 0x65, 0x63, 0xe7, 0xe0, 0x44, 0x65, 0x01, 0x00,
    0xdf, 0xe3, 0xf7, 0x00, 0x20, 0x00, 0x00, 0x00,
};

static char prefix[512];

/* ---- building files ---- */

typedef struct bytes {
    uint8_t *p;
    size_t n;
} bytes;

static void put(bytes *b, const void *src, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_be32(bytes *b, uint32_t v)
{
    uint8_t q[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(b, q, 4);
}
static void put_le(bytes *b, uint32_t v, int n)
{
    for (int i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}

static uint8_t pixel(int i, int y, int x) { return (uint8_t)(((i * 7 + y * 3 + x * x) % 13) * 19); }

static bytes idx_images(int n)
{
    bytes b = {0};
    put_be32(&b, 0x803);
    put_be32(&b, (uint32_t)n);
    put_be32(&b, H);
    put_be32(&b, W);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                uint8_t v = pixel(i, y, x);
                put(&b, &v, 1);
            }
    return b;
}

static bytes idx_labels(int n)
{
    bytes b = {0};
    put_be32(&b, 0x801);
    put_be32(&b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        uint8_t v = (uint8_t)(i % 10);
        put(&b, &v, 1);
    }
    return b;
}

static uint32_t crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

/* A gzip member of stored (uncompressed) DEFLATE blocks of `block` bytes, with a file
 * name in the header. */
static void put_gzip_stored(bytes *g, const uint8_t *data, size_t n, size_t block)
{
    const uint8_t head[10] = {0x1f, 0x8b, 8, 0x08 /* FNAME */, 0, 0, 0, 0, 0, 3};
    put(g, head, sizeof head);
    put(g, "sample.idx", 11);
    size_t off = 0;
    do {
        size_t len = n - off < block ? n - off : block;
        uint8_t final = off + len == n;
        put(g, &final, 1); /* BFINAL, BTYPE 00, then padding to the byte */
        put_le(g, (uint32_t)len, 2);
        put_le(g, (uint32_t)(~len & 0xffff), 2);
        put(g, data + off, len);
        off += len;
    } while (off < n);
    put_le(g, crc32(data, n), 4);
    put_le(g, (uint32_t)n, 4);
}

/* DEFLATE sends bits least significant first; Huffman codes go most significant first. */
typedef struct bitw {
    bytes *b;
    uint32_t acc;
    int n;
} bitw;

static void put_bits(bitw *w, uint32_t v, int n)
{
    for (int i = 0; i < n; i++) {
        w->acc |= ((v >> i) & 1u) << w->n;
        if (++w->n == 8) {
            uint8_t c = (uint8_t)w->acc;
            put(w->b, &c, 1);
            w->acc = 0;
            w->n = 0;
        }
    }
}

static void put_code(bitw *w, uint32_t code, int len)
{
    for (int i = len - 1; i >= 0; i--) put_bits(w, code >> i, 1);
}

/* A gzip member that inflates to head[0..n) and then 1 + 258 * copies zero bytes: the
 * head in a stored block, then a fixed-Huffman block of a literal 0 and `copies` copies
 * of length 258 at distance 1, 13 bits for every 258 bytes (a deflate bomb). */
static void put_gzip_bomb(bytes *g, const uint8_t *head, size_t n, uint32_t copies)
{
    const uint8_t hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    put(g, hdr, sizeof hdr);
    uint8_t stored_hdr = 0; /* BFINAL 0, BTYPE 00 */
    put(g, &stored_hdr, 1);
    put_le(g, (uint32_t)n, 2);
    put_le(g, (uint32_t)(~n & 0xffff), 2);
    put(g, head, n);
    bitw w = {g, 0, 0};
    put_bits(&w, 1, 1); /* BFINAL */
    put_bits(&w, 1, 2); /* BTYPE 01: fixed codes */
    put_code(&w, 0x30, 8); /* literal 0 */
    for (uint32_t i = 0; i < copies; i++) {
        put_code(&w, 0xc5, 8); /* length symbol 285: 258 */
        put_code(&w, 0, 5);    /* distance symbol 0: 1 */
    }
    put_code(&w, 0, 7); /* end of block */
    put_bits(&w, 0, 7); /* to the byte */
    static const uint8_t zeros[1 << 16] = {0};
    uint32_t crc = gd_crc32(0, head, n);
    for (size_t left = 1 + (size_t)258 * copies; left > 0;) {
        size_t k = left < sizeof zeros ? left : sizeof zeros;
        crc = gd_crc32(crc, zeros, k);
        left -= k;
    }
    put_le(g, crc, 4);
    put_le(g, (uint32_t)(n + 1 + (size_t)258 * copies), 4);
}

static const char *path(const char *name)
{
    static char buf[4][1024];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s%s", prefix, name);
    return buf[k];
}

static void write_file(const char *name, const void *p, size_t n)
{
    FILE *f = fopen(path(name), "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n) {
        printf("FAIL: cannot write %s\n", path(name));
        exit(1);
    }
    fclose(f);
}

/* ---- checks ---- */

static void check_contents(const gd_dataset *d, int n, const char *what)
{
    CHECK(d->n == n && d->h == H && d->w == W, "%s: shape %lld x %lldx%lld, want %d x %dx%d", what, (long long)d->n,
          (long long)d->h, (long long)d->w, n, H, W);
    CHECK(d->classes == 10, "%s: classes %d, want 10", what, d->classes);
    if (d->n != n || d->images == NULL || d->labels == NULL) return;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bad += d->labels[i] != i % 10;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                float want = pixel(i, y, x) / 255.0f, got = d->images[(i * H + y) * W + x];
                bad += got < want - 1e-6f || got > want + 1e-6f;
            }
    }
    CHECK(bad == 0, "%s: %d wrong pixels or labels", what, bad);
}

static void load_ok(const char *img, const char *lab, int n, const char *what)
{
    gd_dataset d;
    gd_status st = gd_dataset_load_idx(ctx, path(img), path(lab), &d);
    CHECK(st == GD_OK, "%s: load failed: %s", what, gd_ctx_error(ctx));
    if (st == GD_OK) check_contents(&d, n, what);
    gd_dataset_free(&d);
}

/* Loading must fail with status `want`, a message naming `name_in_msg` and saying `phrase`,
 * and leave the dataset empty. */
static void load_fails(const char *img, const char *lab, gd_status want, const char *name_in_msg, const char *phrase,
                       const char *what)
{
    gd_ctx_clear_error(ctx);
    gd_dataset d;
    memset(&d, 0xab, sizeof d);
    gd_status st = gd_dataset_load_idx(ctx, path(img), path(lab), &d);
    const char *msg = gd_ctx_error(ctx);
    CHECK(st == want, "%s: status %s, want %s (message: %s)", what, gd_status_name(st), gd_status_name(want), msg);
    CHECK(strstr(msg, path(name_in_msg)) != NULL, "%s: message does not name %s: %s", what, path(name_in_msg), msg);
    CHECK(strstr(msg, phrase) != NULL, "%s: message does not say \"%s\": %s", what, phrase, msg);
    CHECK(d.images == NULL && d.labels == NULL && d.n == 0, "%s: failed load left data in the dataset", what);
    if (st == GD_OK) gd_dataset_free(&d);
}

static void test_idx(void)
{
    bytes img = idx_images(N), lab = idx_labels(N);

    /* plain, python gzip (dynamic and fixed blocks), hand-made stored blocks, mixtures */
    write_file("img", img.p, img.n);
    write_file("lab", lab.p, lab.n);
    load_ok("img", "lab", N, "plain IDX");
    write_file("img.gz", py_img_gz, sizeof py_img_gz);
    write_file("lab.gz", py_lab_gz, sizeof py_lab_gz);
    load_ok("img.gz", "lab.gz", N, "python gzip");
    load_ok("img.gz", "lab", N, "gzip images, plain labels");
    bytes simg = {0}, slab = {0};
    put_gzip_stored(&simg, img.p, img.n, 100); /* 16 blocks */
    put_gzip_stored(&slab, lab.p, lab.n, 1000);
    write_file("simg.gz", simg.p, simg.n);
    write_file("slab.gz", slab.p, slab.n);
    load_ok("simg.gz", "slab.gz", N, "stored-block gzip");
    bytes multi = {0}; /* two members: concatenated gzip files decode to the concatenation */
    put_gzip_stored(&multi, img.p, 700, 256);
    put_gzip_stored(&multi, img.p + 700, img.n - 700, 256);
    write_file("multi.gz", multi.p, multi.n);
    load_ok("multi.gz", "lab.gz", N, "two-member gzip");

    /* missing file, bad magic, truncated and oversized data */
    load_fails("nonexistent.gz", "lab", GD_ERR_IO, "nonexistent.gz", "cannot open", "missing images file");
    load_fails("img", "nonexistent", GD_ERR_IO, "nonexistent", "cannot open", "missing labels file");
    load_fails("lab", "lab", GD_ERR_FORMAT, "lab", "bad magic", "labels given as images");
    load_fails("img", "img", GD_ERR_FORMAT, "img", "bad magic", "images given as labels");
    write_file("cut", img.p, img.n - 10);
    load_fails("cut", "lab", GD_ERR_FORMAT, "cut", "truncated", "truncated images");
    write_file("cut", img.p, 9);
    load_fails("cut", "lab", GD_ERR_FORMAT, "cut", "truncated", "truncated header");
    write_file("cut", lab.p, lab.n - 1);
    load_fails("img", "cut", GD_ERR_FORMAT, "cut", "truncated", "truncated labels");
    bytes longer = {0};
    put(&longer, img.p, img.n);
    put(&longer, "xyz", 3);
    write_file("long", longer.p, longer.n);
    load_fails("long", "lab", GD_ERR_FORMAT, "long", "unexpected bytes", "bytes after the data");

    /* count mismatch, label range */
    bytes lab23 = idx_labels(N - 1);
    write_file("lab23", lab23.p, lab23.n);
    load_fails("img", "lab23", GD_ERR_FORMAT, "lab23", "count mismatch", "23 labels for 24 images");
    load_fails("img", "lab23", GD_ERR_FORMAT, "img", "count mismatch", "23 labels for 24 images (names images)");
    for (int t = 0; t < 2; t++) {
        bytes l32 = {0}; /* i32 labels, magic 0x0c01 */
        put_be32(&l32, 0xc01);
        put_be32(&l32, N);
        for (int i = 0; i < N; i++) put_be32(&l32, i == 5 ? (t ? 300u : 0xffffffffu) : (uint32_t)(i % 10));
        write_file("lab32", l32.p, l32.n);
        load_fails("img", "lab32", GD_ERR_FORMAT, "lab32", "out of range", t ? "label 300" : "label -1");
        free(l32.p);
    }

    /* Headers whose count x rows x cols wraps in 64 bits: to 0 beside an empty payload,
     * and to 1 beside one pixel byte (215609 x 924223 x 3702849463 = 40 * 2^64 + 1).
     * Either would load as a dataset far larger than its pixel buffer. */
    bytes wrap = {0}, lab4 = idx_labels(4), labw = idx_labels(215609);
    put_be32(&wrap, 0x803);
    put_be32(&wrap, 4);
    put_be32(&wrap, 1u << 31);
    put_be32(&wrap, 1u << 31);
    write_file("wrap", wrap.p, wrap.n);
    write_file("lab4", lab4.p, lab4.n);
    load_fails("wrap", "lab4", GD_ERR_FORMAT, "wrap", "overflows", "4 images of 2^31 x 2^31");
    wrap.n = 0;
    put_be32(&wrap, 0x803);
    put_be32(&wrap, 215609);
    put_be32(&wrap, 924223);
    put_be32(&wrap, 3702849463u);
    put(&wrap, "\x80", 1);
    write_file("wrap", wrap.p, wrap.n);
    write_file("labw", labw.p, labw.n);
    load_fails("wrap", "labw", GD_ERR_FORMAT, "wrap", "overflows", "a product that wraps to 1");
    /* A label count that passes the payload is truncation, whatever the count. */
    bytes labx = {0};
    put_be32(&labx, 0xc01);
    put_be32(&labx, 0xffffffffu);
    put(&labx, "\0\0\0\1", 4);
    write_file("labx", labx.p, labx.n);
    load_fails("img", "labx", GD_ERR_FORMAT, "labx", "truncated", "2^32-1 i32 labels in 4 bytes");

    /* gzip damage: header, truncation, CRC, ISIZE, stored lengths, corrupt codes */
    uint8_t gz[sizeof py_img_gz];
    memcpy(gz, py_img_gz, sizeof gz);
    gz[2] = 7;
    write_file("bad.gz", gz, sizeof gz);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "bad gzip header", "compression method 7");
    memcpy(gz, py_img_gz, sizeof gz);
    gz[3] = 0x80;
    write_file("bad.gz", gz, sizeof gz);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "bad gzip header", "reserved flag");
    write_file("bad.gz", py_img_gz, sizeof py_img_gz / 2);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "truncated", "gzip cut in half");
    write_file("bad.gz", py_img_gz, sizeof py_img_gz - 5);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "truncated", "gzip trailer cut");
    write_file("bad.gz", py_img_gz, 12);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "truncated", "gzip of 12 bytes");
    memcpy(gz, py_img_gz, sizeof gz);
    gz[sizeof gz - 8] ^= 1; /* first CRC byte */
    write_file("bad.gz", gz, sizeof gz);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "CRC32 mismatch", "CRC trailer changed");
    memcpy(gz, py_img_gz, sizeof gz);
    gz[sizeof gz - 4] ^= 1; /* ISIZE */
    write_file("bad.gz", gz, sizeof gz);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "ISIZE mismatch", "ISIZE changed");
    bytes s = {0};
    put(&s, simg.p, simg.n);
    s.p[s.n / 2] ^= 0x10; /* inside a stored block's data: only the CRC can tell */
    write_file("bad.gz", s.p, s.n);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "CRC32 mismatch", "stored data changed");
    memcpy(s.p, simg.p, simg.n);
    s.p[21 + 1] ^= 1; /* first block's LEN (header 10 + name 11 + BFINAL byte) */
    write_file("bad.gz", s.p, s.n);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "stored block", "stored LEN != ~NLEN");
    bytes trail = {0};
    put(&trail, slab.p, slab.n);
    put(&trail, "junk", 4);
    write_file("bad.gz", trail.p, trail.n);
    load_fails("img", "bad.gz", GD_ERR_FORMAT, "bad.gz", "trailing garbage", "junk after the gzip member");
    memcpy(gz, py_img_gz, sizeof gz);
    gz[10] |= 6; /* first block's BTYPE = 3 */
    write_file("bad.gz", gz, sizeof gz);
    load_fails("bad.gz", "lab", GD_ERR_FORMAT, "bad.gz", "block type", "block type 3");
    /* A gzip file that inflates past what its IDX header declares is stopped there: one
     * 28x28 image, then 17 MB of zeros from 106 KB of DEFLATE. */
    bytes bomb = {0}, one = {0};
    put_be32(&one, 0x803);
    put_be32(&one, 1);
    put_be32(&one, 28);
    put_be32(&one, 28);
    put_gzip_bomb(&bomb, one.p, one.n, 65536);
    write_file("bomb.gz", bomb.p, bomb.n);
    load_fails("bomb.gz", "lab", GD_ERR_FORMAT, "bomb.gz", "inflates to more than the 800 bytes its header declares",
               "deflate bomb behind a one-image header");
    bytes extra = {0}; /* the same for labels: 24 declared, 25 inflated */
    bytes lab25 = idx_labels(N + 1);
    memcpy(lab25.p + 4, lab.p + 4, 4);
    put_gzip_stored(&extra, lab25.p, lab25.n, 1000);
    write_file("extra.gz", extra.p, extra.n);
    load_fails("img", "extra.gz", GD_ERR_FORMAT, "extra.gz", "inflates to more than the 32 bytes", "one label too many");

    /* Every single-bit flip in the compressed data must fail cleanly, never crash and
     * never pass: the CRC catches whatever the decoder's structure checks let through.
     * The exception is the padding after the end-of-block code, in the high bits of the
     * last byte, which no decoder reads; those flips must decode to the right data. */
    int passed = 0, padding = 0;
    for (size_t i = 10; i < sizeof gz - 8; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(gz, py_img_gz, sizeof gz);
            gz[i] ^= (uint8_t)(1 << bit);
            write_file("bad.gz", gz, sizeof gz);
            gd_dataset d;
            if (gd_dataset_load_idx(ctx, path("bad.gz"), path("lab"), &d) == GD_OK) {
                if (i == sizeof gz - 9) padding++;
                else passed++;
                check_contents(&d, N, "bit flip in the padding");
                gd_dataset_free(&d);
            }
        }
    CHECK(passed == 0, "%d single-bit corruptions of the deflate data loaded without an error", passed);
    CHECK(padding <= 7, "%d bit flips in the last byte loaded; at most its 7 padding bits may", padding);

    free(img.p);
    free(lab.p);
    free(simg.p);
    free(slab.p);
    free(multi.p);
    free(longer.p);
    free(lab23.p);
    free(s.p);
    free(trail.p);
    free(wrap.p);
    free(bomb.p);
    free(one.p);
    free(extra.p);
    free(lab25.p);
    free(lab4.p);
    free(labw.p);
    free(labx.p);
    const char *names[] = {"img", "lab", "img.gz", "lab.gz", "simg.gz", "slab.gz", "multi.gz", "cut",
                           "long", "lab23", "lab32", "bad.gz", "wrap", "lab4", "labw", "labx", "bomb.gz", "extra.gz"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) remove(path(names[i]));
}

/* gd_gunzip's output bound and gd_gunzip_head, on each block type and across members. */
static void gunzip_bound(const char *what, const bytes *gz, const uint8_t *want, size_t want_n)
{
    char err[256] = "";
    uint8_t *out;
    size_t out_n;
    gd_status st = gd_gunzip(gz->p, gz->n, want_n, &out, &out_n, err, sizeof err);
    CHECK(st == GD_OK && out_n == want_n && memcmp(out, want, want_n) == 0, "%s: bound = size: %s", what,
          st == GD_OK ? "wrong bytes" : err);
    free(out);
    st = gd_gunzip(gz->p, gz->n, want_n - 1, &out, &out_n, err, sizeof err);
    CHECK(st == GD_ERR_FORMAT && out == NULL && out_n > want_n - 1, "%s: bound = size - 1: status %s, %zu bytes", what,
          gd_status_name(st), out_n);
    CHECK(strstr(err, "more than") != NULL, "%s: bound = size - 1: message \"%s\"", what, err);
    size_t wants[] = {0, 1, 16, want_n - 1, want_n, want_n + 100};
    for (size_t i = 0; i < sizeof wants / sizeof wants[0]; i++) {
        uint8_t *head = malloc(wants[i] + 1);
        size_t got;
        st = gd_gunzip_head(gz->p, gz->n, wants[i], head, &got, err, sizeof err);
        size_t expect = wants[i] < want_n ? wants[i] : want_n;
        CHECK(st == GD_OK && got == expect && memcmp(head, want, expect) == 0, "%s: head of %zu bytes: %s", what,
              wants[i], st == GD_OK ? "wrong bytes" : err);
        free(head);
    }
}

static void test_gunzip(void)
{
    bytes img = idx_images(N), g = {0};
    put_gzip_stored(&g, img.p, img.n, 100);
    gunzip_bound("stored blocks", &g, img.p, img.n);
    g.n = 0;
    put_gzip_stored(&g, img.p, 700, 256);
    put_gzip_stored(&g, img.p + 700, img.n - 700, 256);
    gunzip_bound("two members", &g, img.p, img.n);
    g.n = 0;
    put(&g, py_img_gz, sizeof py_img_gz);
    gunzip_bound("dynamic block", &g, img.p, img.n);
    bytes lab = idx_labels(N);
    g.n = 0;
    put(&g, py_lab_gz, sizeof py_lab_gz);
    gunzip_bound("fixed block", &g, lab.p, lab.n);

    /* Empty members (a fixed block holding only end-of-block, or an empty stored block)
     * anywhere in a file add nothing; a file of only empty members decodes to nothing. */
    static const uint8_t empty_fixed[20] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0x03, 0x00};
    g.n = 0;
    put(&g, empty_fixed, sizeof empty_fixed);
    put_gzip_stored(&g, img.p, 0, 100);
    uint8_t *out;
    size_t out_n;
    char err[256] = "";
    gd_status st = gd_gunzip(g.p, g.n, SIZE_MAX, &out, &out_n, err, sizeof err);
    CHECK(st == GD_OK && out_n == 0, "two empty members: status %s, %zu bytes (%s)", gd_status_name(st), out_n, err);
    free(out);
    g.n = 0;
    put(&g, empty_fixed, sizeof empty_fixed);
    put_gzip_stored(&g, img.p, 300, 100);
    put_gzip_stored(&g, img.p, 0, 100);
    put(&g, empty_fixed, sizeof empty_fixed);
    put_gzip_stored(&g, img.p + 300, img.n - 300, 1000);
    put(&g, empty_fixed, sizeof empty_fixed);
    gunzip_bound("empty members between others", &g, img.p, img.n);

    /* A dynamic block whose code-length code is incomplete (some bit patterns are no
     * code) but which decodes, CRC and all, without meeting one: zlib refuses it, so a
     * decoder that accepted it would read files no other tool reads. */
    static const uint8_t incomplete[41] = {
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x02, 0x00, 0xd0, 0x00, 0x03, 0x85, 0xee, 0x85, 0xa2,
        0x00, 0x00, 0x00, 0x00, 0x35, 0xd3, 0xd5, 0xd2, 0xf9, 0x00, 0x00, 0x00, 0x03, 0x00,
        0x00, 0x00, 0x02, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    st = gd_gunzip(incomplete, sizeof incomplete, SIZE_MAX, &out, &out_n, err, sizeof err);
    CHECK(st == GD_ERR_FORMAT && strstr(err, "incomplete") != NULL, "incomplete code-length code: status %s (%s)",
          gd_status_name(st), err);
    free(out);

    /* A bomb stops at the bound, long before its 17 MB. */
    bytes bomb = {0};
    put_gzip_bomb(&bomb, img.p, 16, 65536);
    st = gd_gunzip(bomb.p, bomb.n, 1 << 20, &out, &out_n, err, sizeof err);
    CHECK(st == GD_ERR_FORMAT && out == NULL && out_n > (1 << 20), "bomb: status %s, %zu bytes", gd_status_name(st),
          out_n);
    CHECK(strstr(err, "more than 1048576 bytes") != NULL, "bomb: message \"%s\"", err);
    uint8_t head[16];
    size_t got;
    st = gd_gunzip_head(bomb.p, bomb.n, sizeof head, head, &got, err, sizeof err);
    CHECK(st == GD_OK && got == 16 && memcmp(head, img.p, 16) == 0, "bomb: head: %s", err);
    free(img.p);
    free(lab.p);
    free(g.p);
    free(bomb.p);
}

static void test_shapes(void)
{
    gd_dataset a, b, c, big;
    CHECK(gd_dataset_shapes(ctx, 1000, 42, &a) == GD_OK, "shapes: %s", gd_ctx_error(ctx));
    CHECK(gd_dataset_shapes(ctx, 1000, 42, &b) == GD_OK, "shapes: %s", gd_ctx_error(ctx));
    CHECK(gd_dataset_shapes(ctx, 1000, 43, &c) == GD_OK, "shapes: %s", gd_ctx_error(ctx));
    CHECK(gd_dataset_shapes(ctx, 3000, 42, &big) == GD_OK, "shapes: %s", gd_ctx_error(ctx));
    if (failures) return;
    size_t px = 1000 * 28 * 28;
    CHECK(a.n == 1000 && a.h == 28 && a.w == 28 && a.classes == 10, "shapes: %lld x %lldx%lld in %d classes",
          (long long)a.n, (long long)a.h, (long long)a.w, a.classes);
    CHECK(memcmp(a.images, b.images, px * sizeof(float)) == 0 && memcmp(a.labels, b.labels, 1000 * 4) == 0,
          "shapes: same seed, different images");
    CHECK(memcmp(a.images, c.images, px * sizeof(float)) != 0, "shapes: seeds 42 and 43 gave the same images");
    CHECK(memcmp(a.images, big.images, px * sizeof(float)) == 0, "shapes: the first 1000 of 3000 differ from 1000");
    int count[10] = {0}, out_of_range = 0;
    for (int64_t i = 0; i < big.n; i++) {
        if (big.labels[i] < 0 || big.labels[i] >= 10) out_of_range++;
        else count[big.labels[i]]++;
    }
    CHECK(out_of_range == 0, "shapes: %d labels outside [0, 10)", out_of_range);
    for (int k = 0; k < 10; k++) CHECK(count[k] == 300, "shapes: class %d has %d of 3000 examples, want 300", k, count[k]);
    /* Pixels in [0, 1]; images of one class differ from each other (random placement);
     * and every image has a shape in it: its brightest pixels well above its median. */
    int bad_range = 0, same = 0, blank = 0;
    for (int64_t i = 0; i < big.n; i++) {
        const float *im = big.images + i * 784;
        float lo = 1, hi = 0;
        for (int p = 0; p < 784; p++) {
            bad_range += !(im[p] >= 0 && im[p] <= 1);
            lo = im[p] < lo ? im[p] : lo;
            hi = im[p] > hi ? im[p] : hi;
        }
        blank += hi - lo < 0.3f;
        if (i >= 10) same += memcmp(im, im - 10 * 784, 784 * sizeof(float)) == 0;
    }
    CHECK(bad_range == 0, "shapes: %d pixels outside [0, 1]", bad_range);
    CHECK(same == 0, "shapes: %d images equal to the previous one of their class", same);
    CHECK(blank == 0, "shapes: %d images without contrast", blank);
    gd_dataset_free(&a);
    gd_dataset_free(&b);
    gd_dataset_free(&c);
    gd_dataset_free(&big);
    gd_dataset bad;
    CHECK(gd_dataset_shapes(ctx, 0, 1, &bad) != GD_OK, "shapes: n = 0 accepted");
}

static void test_shuffle(void)
{
    enum { M = 1000 };
    int64_t a[M], b[M], c[M];
    int seen[M] = {0}, moved = 0;
    gd_shuffle(a, M, 7);
    gd_shuffle(b, M, 7);
    gd_shuffle(c, M, 8);
    int dup = 0;
    for (int i = 0; i < M; i++) {
        if (a[i] < 0 || a[i] >= M || seen[a[i]]++) dup++;
        moved += a[i] != i;
    }
    CHECK(dup == 0, "shuffle: not a permutation (%d bad entries)", dup);
    CHECK(moved > M / 2, "shuffle: only %d of %d moved", moved, M);
    CHECK(memcmp(a, b, sizeof a) == 0, "shuffle: same seed, different order");
    CHECK(memcmp(a, c, sizeof a) != 0, "shuffle: seeds 7 and 8 gave the same order");
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    /* Scratch files are GD_BUILD_DIR/test_idx_<pid>_<name>, removed at the end. */
    snprintf(prefix, sizeof prefix, "%s/test_idx_%d_", GD_BUILD_DIR, (int)getpid());
    /* Loaders report through their status and the context, never on stdout: everything
     * they print while loading every file above is caught here and must be nothing. */
    fflush(stdout);
    int saved = dup(1), fd = open(path("stdout"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, 1) == 1, "cannot redirect stdout");
    test_idx();
    test_gunzip();
    fflush(stdout);
    off_t printed = lseek(fd, 0, SEEK_END);
    dup2(saved, 1);
    close(saved);
    close(fd);
    remove(path("stdout"));
    CHECK(printed == 0, "loading printed %lld bytes on stdout", (long long)printed);
    test_shapes();
    test_shuffle();
    return tu_finish("test_idx");
}
