/* fuzz_idx.c — libFuzzer target: the IDX dataset decoder (images and labels, plain or
 * gzip), as gd_dataset_load_idx runs it after reading the two files.
 *
 * Input: two bytes (little-endian) giving the length k of the image file, then the image
 * file (the next k bytes, or all that is left) and then the label file. Each file gets a
 * buffer of exactly its size, so that reading past its end is caught.
 *
 * A load that succeeds must describe memory it owns (every pixel and label is read back)
 * with labels in range; a load that fails must leave the dataset empty and a message
 * naming the file at fault. Exiting, aborting or printing are failures of the target.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/idx.
 */
#include "checked.h"
#include "idx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gd_ctx *ctx;

static void bad(const char *what)
{
    fprintf(stderr, "IDX decoder: %s (message: %s)\n", what, gd_ctx_error(ctx));
    abort();
}

static uint8_t *copy(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n > 0 ? n : 1);
    if (q == NULL) abort();
    if (n > 0) memcpy(q, p, n);
    return q;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL && gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK)
        abort();
    if (size < 2) return 0;
    size_t k = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2;
    size -= 2;
    if (k > size) k = size;
    uint8_t *img = copy(data, k), *lab = copy(data + k, size - k);
    gd_ctx_clear_error(ctx);
    gd_dataset d;
    memset(&d, 0x5a, sizeof d);
    gd_status st = gd_idx_decode(ctx, "images.idx", img, k, "labels.idx", lab, size - k, &d);
    if (st == GD_OK) {
        if (d.n <= 0 || d.h <= 0 || d.w <= 0 || d.images == NULL || d.labels == NULL)
            bad("a dataset without examples loaded");
        if (d.classes <= 0 || d.classes > 256) bad("class count out of range");
        /* The pixels came from the input, at most 1032 bytes of DEFLATE output per byte. */
        int64_t px;
        if (gd_numel_checked(3, (const int64_t[]){d.n, d.h, d.w}, &px) != 0 || (uint64_t)px > (uint64_t)k * 1032)
            bad("more pixels than the input holds");
        for (int64_t i = 0; i < px; i++)
            if (!(d.images[i] >= 0.0f && d.images[i] <= 1.0f)) bad("a pixel outside [0, 1]");
        for (int64_t i = 0; i < d.n; i++)
            if (d.labels[i] < 0 || d.labels[i] >= d.classes) bad("a label outside [0, classes)");
    } else {
        const char *msg = gd_ctx_error(ctx);
        if (strstr(msg, "images.idx") == NULL && strstr(msg, "labels.idx") == NULL) bad("a message naming no file");
        if (d.n != 0 || d.images != NULL || d.labels != NULL) bad("a failed load left data in the dataset");
    }
    gd_dataset_free(&d);
    free(img);
    free(lab);
    return 0;
}
