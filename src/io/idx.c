/* idx.c — image/label datasets in the IDX format of MNIST and Fashion-MNIST.
 *
 * An IDX file is a big-endian header and then the data: magic 00 00 08 03 and three
 * u32 dims (count, rows, cols) before count*rows*cols pixel bytes; magic 00 00 08 01 and
 * one dim (count) before count label bytes. Labels may also be big-endian i32 (magic
 * 00 00 0c 01), which some converters write. Files are often gzip-compressed; the gzip
 * magic decides, not the file name. */
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

/* Reads a whole file, inflating it when it is gzip. */
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
        uint8_t *bigger = realloc(buf, cap * 2);
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
    if (gd_is_gzip(buf, len)) {
        char err[512];
        uint8_t *raw;
        size_t raw_n;
        gd_status st = gd_gunzip(buf, len, &raw, &raw_n, err, sizeof err);
        free(buf);
        if (st != GD_OK) return idx_fail(ctx, st, "%s: %s", path, err);
        buf = raw;
        len = raw_n;
    }
    *data = buf;
    *n = len;
    return GD_OK;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Checks the magic and that exactly `payload` bytes follow a header of `header` bytes. */
static gd_status check_size(gd_ctx *ctx, const char *path, size_t n, size_t header, uint64_t payload,
                            const char *what)
{
    if (n - header < payload)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: truncated: the header promises %s (%llu bytes) but only %zu bytes follow",
                        path, what, (unsigned long long)payload, n - header);
    if (n - header > payload)
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: %zu unexpected bytes after %s", path,
                        n - header - (size_t)payload, what);
    return GD_OK;
}

static gd_status load_images(gd_ctx *ctx, const char *path, gd_dataset *out)
{
    uint8_t *d;
    size_t n;
    gd_status st = read_file(ctx, path, &d, &n);
    if (st != GD_OK) return st;
    if (n < 16) {
        free(d);
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: truncated: %zu bytes, an IDX image header is 16", path, n);
    }
    uint32_t magic = be32(d);
    if (magic != 0x00000803) {
        free(d);
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: bad magic 0x%08x: not an IDX image file (want 0x00000803, u8 pixels in 3 dims)",
                        path, magic);
    }
    uint32_t count = be32(d + 4), rows = be32(d + 8), cols = be32(d + 12);
    if (count == 0 || rows == 0 || cols == 0) {
        free(d);
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: empty image set (%u images of %ux%u)", path, count, rows, cols);
    }
    char what[96];
    snprintf(what, sizeof what, "%u images of %ux%u", count, rows, cols);
    uint64_t pixels = (uint64_t)count * rows * cols;
    st = check_size(ctx, path, n, 16, pixels, what);
    if (st == GD_OK) {
        out->images = malloc(pixels * sizeof(float));
        if (out->images == NULL) st = idx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory for %s", path, what);
    }
    if (st == GD_OK) {
        for (uint64_t i = 0; i < pixels; i++) out->images[i] = d[16 + i] * (1.0f / 255.0f);
        out->n = count;
        out->h = rows;
        out->w = cols;
    }
    free(d);
    return st;
}

static gd_status load_labels(gd_ctx *ctx, const char *path, gd_dataset *out)
{
    uint8_t *d;
    size_t n;
    gd_status st = read_file(ctx, path, &d, &n);
    if (st != GD_OK) return st;
    if (n < 8) {
        free(d);
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: truncated: %zu bytes, an IDX label header is 8", path, n);
    }
    uint32_t magic = be32(d), count = be32(d + 4);
    size_t width = magic == 0x00000801 ? 1 : magic == 0x00000c01 ? 4 : 0;
    if (width == 0) {
        free(d);
        return idx_fail(ctx, GD_ERR_FORMAT, "%s: bad magic 0x%08x: not an IDX label file (want 0x00000801, u8 labels)",
                        path, magic);
    }
    char what[64];
    snprintf(what, sizeof what, "%u labels", count);
    st = check_size(ctx, path, n, 8, (uint64_t)count * width, what);
    if (st == GD_OK && count == 0) st = idx_fail(ctx, GD_ERR_FORMAT, "%s: empty label set", path);
    if (st == GD_OK) {
        out->labels = malloc((size_t)count * sizeof(int32_t));
        if (out->labels == NULL) st = idx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory for %s", path, what);
    }
    int32_t top = -1;
    for (uint32_t i = 0; st == GD_OK && i < count; i++) {
        int32_t v = width == 1 ? d[8 + i] : (int32_t)be32(d + 8 + 4 * (size_t)i);
        if (v < 0 || v >= IDX_MAX_CLASSES)
            st = idx_fail(ctx, GD_ERR_FORMAT, "%s: label %d of example %u is out of range [0, %d)", path, v, i,
                          IDX_MAX_CLASSES);
        out->labels[i] = v;
        if (v > top) top = v;
    }
    if (st == GD_OK) {
        out->classes = top + 1;
        out->n = count;
    }
    free(d);
    return st;
}

gd_status gd_dataset_load_idx(gd_ctx *ctx, const char *images_path, const char *labels_path, gd_dataset *out)
{
    if (out == NULL) return idx_fail(ctx, GD_ERR_INVALID, "gd_dataset_load_idx: out is NULL");
    memset(out, 0, sizeof *out);
    if (images_path == NULL || labels_path == NULL)
        return idx_fail(ctx, GD_ERR_INVALID, "gd_dataset_load_idx: %s path is NULL", images_path ? "labels" : "images");
    gd_dataset img = {0}, lab = {0};
    gd_status st = load_images(ctx, images_path, &img);
    if (st == GD_OK) st = load_labels(ctx, labels_path, &lab);
    if (st == GD_OK && img.n != lab.n)
        st = idx_fail(ctx, GD_ERR_FORMAT, "count mismatch: %s has %lld images but %s has %lld labels", images_path,
                      (long long)img.n, labels_path, (long long)lab.n);
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
