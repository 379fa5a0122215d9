/* idx.c — image/label datasets in the IDX format of MNIST and Fashion-MNIST.
 *
 * An IDX file is a big-endian header and then the data: magic 00 00 08 03 and three
 * u32 dims (count, rows, cols) before count*rows*cols pixel bytes; magic 00 00 08 01 and
 * one dim (count) before count label bytes. Labels may also be big-endian i32 (magic
 * 00 00 0c 01), which some converters write. Files are often gzip-compressed; the gzip
 * magic decides, not the file name.
 *
 * A header is untrusted: every size it implies is computed with checked arithmetic
 * (checked.h) and must equal the bytes that follow it, so that no header can make the
 * loader allocate or read what the file does not hold. */
#include "idx.h"

#include "checked.h"
#include "inflate.h"
#include "opdef.h"
#include "gradus_classifier.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The classifiers index logits with labels; anything past this is a corrupt file rather
 * than a dataset with that many classes. */
#define IDX_MAX_CLASSES 256

#define MAGIC_IMAGES 0x00000803u
#define MAGIC_LABELS_U8 0x00000801u
#define MAGIC_LABELS_I32 0x00000c01u
#define IDX_HEADER_MAX 16 /* the longest header, the images' */

static gd_status idx_fail(gd_ctx *ctx, gd_status st, const char *fmt, ...)
{
    if (ctx != NULL) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        gd_fail(ctx, st, "%s", msg);
    }
    return st;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* What a header declares. */
typedef struct idx_header {
    size_t header;          /* bytes of the header itself */
    size_t payload;         /* bytes of data it promises after itself */
    uint32_t count, rows, cols;
    size_t width;           /* bytes per value: 1 for pixels, 1 or 4 for labels */
    char what[96];          /* "4 images of 28x28", for messages */
} idx_header;

typedef gd_status (*header_fn)(gd_ctx *ctx, const char *name, const uint8_t *d, size_t n, idx_header *h);

static gd_status images_header(gd_ctx *ctx, const char *name, const uint8_t *d, size_t n, idx_header *h)
{
    memset(h, 0, sizeof *h);
    if (n < 16) return idx_fail(ctx, GD_ERR_FORMAT, "%s: truncated: %zu bytes, an IDX image header is 16", name, n);
    uint32_t magic = be32(d);
    if (magic != MAGIC_IMAGES)
        return idx_fail(ctx, GD_ERR_FORMAT,
                        "%s: bad magic 0x%08x: not an IDX image file (want 0x%08x, u8 pixels in 3 dims)", name, magic,
                        MAGIC_IMAGES);
    h->count = be32(d + 4);
    h->rows = be32(d + 8);
    h->cols = be32(d + 12);
    snprintf(h->what, sizeof h->what, "%u images of %ux%u", h->count, h->rows, h->cols);
    if (h->count == 0 || h->rows == 0 || h->cols == 0)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: empty image set (%s)", name, h->what);
    h->header = 16;
    h->width = 1;
    if (gd_mul_size(h->count, h->rows, &h->payload) != 0 || gd_mul_size(h->payload, h->cols, &h->payload) != 0)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: the header declares %s: the pixel count overflows", name, h->what);
    return GD_OK;
}

static gd_status labels_header(gd_ctx *ctx, const char *name, const uint8_t *d, size_t n, idx_header *h)
{
    memset(h, 0, sizeof *h);
    if (n < 8) return idx_fail(ctx, GD_ERR_FORMAT, "%s: truncated: %zu bytes, an IDX label header is 8", name, n);
    uint32_t magic = be32(d);
    h->width = magic == MAGIC_LABELS_U8 ? 1 : magic == MAGIC_LABELS_I32 ? 4 : 0;
    if (h->width == 0)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: bad magic 0x%08x: not an IDX label file (want 0x%08x, u8 labels)",
                        name, magic, MAGIC_LABELS_U8);
    h->count = be32(d + 4);
    snprintf(h->what, sizeof h->what, "%u labels", h->count);
    h->header = 8;
    if (gd_mul_size(h->count, h->width, &h->payload) != 0)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: the header declares %s of %zu bytes: the size overflows", name,
                        h->what, h->width);
    return GD_OK;
}

/* Exactly the payload the header declares must follow it. */
static gd_status check_size(gd_ctx *ctx, const char *name, size_t n, const idx_header *h)
{
    size_t have = n - h->header;
    if (have < h->payload)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: truncated: the header promises %s (%zu bytes) but only %zu bytes follow",
                        name, h->what, h->payload, have);
    if (have > h->payload)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: %zu unexpected bytes after %s", name, have - h->payload, h->what);
    return GD_OK;
}

/* Inflates a gzip IDX file into *out, no further than its header says the file is: the
 * header is read from the first inflated bytes, so that a small file which inflates to
 * gigabytes is stopped after the declared size instead of after all of it. */
static gd_status inflate_idx(gd_ctx *ctx, const char *name, const uint8_t *d, size_t n, header_fn parse,
                             idx_header *h, uint8_t **out, size_t *out_n)
{
    char err[512];
    uint8_t head[IDX_HEADER_MAX];
    size_t got;
    gd_status st = gd_gunzip_head(d, n, sizeof head, head, &got, err, sizeof err);
    if (st != GD_OK) return idx_fail(ctx, st, "%s: %s", name, err);
    st = parse(ctx, name, head, got, h);
    if (st != GD_OK) return st;
    size_t total;
    if (gd_add_size(h->header, h->payload, &total) != 0)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: the header declares %s: the file size overflows", name, h->what);
    st = gd_gunzip(d, n, total, out, out_n, err, sizeof err);
    if (st != GD_OK && *out_n > total)
        return idx_fail(ctx, st, "%s: the gzip data inflates to more than the %zu bytes its header declares (%s after "
                        "a %zu-byte header); stopped there", name, total, h->what, h->header);
    if (st != GD_OK) return idx_fail(ctx, st, "%s: %s", name, err);
    return GD_OK;
}

/* Decodes the header of one file and finds its payload: in `d` itself when the file is
 * plain, else in the inflated copy returned in *owned (the caller frees it). */
static gd_status open_idx(gd_ctx *ctx, const char *name, const uint8_t *d, size_t n, header_fn parse,
                          idx_header *h, const uint8_t **payload, uint8_t **owned)
{
    *owned = NULL;
    if (gd_is_gzip(d, n)) {
        uint8_t *raw;
        size_t raw_n;
        gd_status st = inflate_idx(ctx, name, d, n, parse, h, &raw, &raw_n);
        if (st != GD_OK) return st;
        *owned = raw;
        d = raw;
        n = raw_n;
    }
    gd_status st = parse(ctx, name, d, n, h);
    if (st == GD_OK) st = check_size(ctx, name, n, h);
    if (st != GD_OK) {
        free(*owned);
        *owned = NULL;
        return st;
    }
    *payload = d + h->header;
    return GD_OK;
}

static gd_status decode_images(gd_ctx *ctx, const char *name, const uint8_t *bytes, size_t n, gd_dataset *out)
{
    idx_header h;
    const uint8_t *px = NULL;
    uint8_t *owned;
    gd_status st = open_idx(ctx, name, bytes, n, images_header, &h, &px, &owned);
    if (st != GD_OK) return st;
    size_t size = 0;
    if (gd_numel_bytes(3, (const int64_t[]){h.count, h.rows, h.cols}, sizeof(float), &size) != 0)
        st = idx_fail(ctx, GD_ERR_NOMEM, "%s: %s are too large to hold as floats", name, h.what);
    if (st == GD_OK && (out->images = malloc(size)) == NULL)
        st = idx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory for %s (%zu bytes as floats)", name, h.what, size);
    if (st == GD_OK) {
        for (size_t i = 0; i < h.payload; i++) out->images[i] = px[i] * (1.0f / 255.0f);
        out->n = h.count;
        out->h = h.rows;
        out->w = h.cols;
    }
    free(owned);
    return st;
}

static gd_status decode_labels(gd_ctx *ctx, const char *name, const uint8_t *bytes, size_t n, gd_dataset *out)
{
    idx_header h;
    const uint8_t *d = NULL;
    uint8_t *owned;
    gd_status st = open_idx(ctx, name, bytes, n, labels_header, &h, &d, &owned);
    if (st != GD_OK) return st;
    size_t size = 0;
    if (h.count == 0) st = idx_fail(ctx, GD_ERR_FORMAT, "%s: empty label set", name);
    else if (gd_mul_size(h.count, sizeof(int32_t), &size) != 0)
        st = idx_fail(ctx, GD_ERR_NOMEM, "%s: %s are too large to hold", name, h.what);
    else if ((out->labels = malloc(size)) == NULL)
        st = idx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory for %s", name, h.what);
    int32_t top = -1;
    for (uint32_t i = 0; st == GD_OK && i < h.count; i++) {
        int32_t v = h.width == 1 ? d[i] : (int32_t)be32(d + 4 * (size_t)i);
        if (v < 0 || v >= IDX_MAX_CLASSES)
            st = idx_fail(ctx, GD_ERR_FORMAT, "%s: label %d of example %u is out of range [0, %d)", name, v, i,
                          IDX_MAX_CLASSES);
        out->labels[i] = v;
        if (v > top) top = v;
    }
    if (st == GD_OK) {
        out->classes = top + 1;
        out->n = h.count;
    }
    free(owned);
    return st;
}

gd_status gd_idx_decode(gd_ctx *ctx, const char *images_name, const uint8_t *images, size_t images_n,
                        const char *labels_name, const uint8_t *labels, size_t labels_n, gd_dataset *out)
{
    if (out == NULL) return idx_fail(ctx, GD_ERR_INVALID, "gd_idx_decode: out is NULL");
    memset(out, 0, sizeof *out);
    gd_dataset img = {0}, lab = {0};
    gd_status st = decode_images(ctx, images_name, images, images_n, &img);
    if (st == GD_OK) st = decode_labels(ctx, labels_name, labels, labels_n, &lab);
    if (st == GD_OK && img.n != lab.n)
        st = idx_fail(ctx, GD_ERR_FORMAT, "count mismatch: %s has %lld images but %s has %lld labels", images_name,
                      (long long)img.n, labels_name, (long long)lab.n);
    if (st != GD_OK) {
        free(img.images);
        free(lab.labels);
        return st;
    }
    *out = img;
    out->labels = lab.labels;
    out->classes = lab.classes;
    return GD_OK;
}

/* Reads a whole file as it is on disk. */
static gd_status read_file(gd_ctx *ctx, const char *path, uint8_t **data, size_t *n)
{
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return idx_fail(ctx, GD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) {
            fclose(f);
            return idx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, cap);
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *bigger = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (bigger == NULL) free(buf);
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return idx_fail(ctx, GD_ERR_IO, "%s: read error", path);
    }
    *data = buf;
    *n = len;
    return GD_OK;
}

gd_status gd_dataset_load_idx(gd_ctx *ctx, const char *images_path, const char *labels_path, gd_dataset *out)
{
    if (out == NULL) return idx_fail(ctx, GD_ERR_INVALID, "gd_dataset_load_idx: out is NULL");
    memset(out, 0, sizeof *out);
    if (images_path == NULL || labels_path == NULL)
        return idx_fail(ctx, GD_ERR_INVALID, "gd_dataset_load_idx: %s path is NULL", images_path ? "labels" : "images");
    uint8_t *img = NULL, *lab = NULL;
    size_t img_n = 0, lab_n = 0;
    gd_status st = read_file(ctx, images_path, &img, &img_n);
    if (st == GD_OK) st = read_file(ctx, labels_path, &lab, &lab_n);
    if (st == GD_OK) st = gd_idx_decode(ctx, images_path, img, img_n, labels_path, lab, lab_n, out);
    free(img);
    free(lab);
    return st;
}

void gd_dataset_free(gd_dataset *d)
{
    if (d == NULL) return;
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

void gd_shuffle(int64_t *idx, int64_t n, uint64_t seed)
{
    if (idx == NULL || n <= 0) return;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    /* Fisher-Yates; 64 random bits per draw make the modulo bias negligible. */
    for (int64_t i = n - 1; i > 0; i--) {
        gdp_philox_out r = gdp_philox4x32((uint64_t)i, 0x5348554646ull /* "SHUFF" */, seed);
        uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
        int64_t j = (int64_t)(bits % (uint64_t)(i + 1));
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}
