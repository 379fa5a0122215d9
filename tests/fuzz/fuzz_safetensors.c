/* libFuzzer target for the safetensors reader: any bytes given to gd_st_open_mem must be
 * refused with a message naming the file, or accepted with every tensor's range inside
 * the input and consistent with its dtype and shape. Reading each accepted tensor's bytes
 * lets ASan catch a range that escapes the input.
 *
 * Random bytes rarely carry a header length that matches their JSON, so each input is
 * also tried a second way when it has a NUL byte: the text before it as the header, with
 * its length prefixed, and the bytes after it as the data. Mutations of the JSON then
 * reach the checks of the tensors.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/safetensors
 * and dictionary tests/fuzz/safetensors.dict.
 */
#include "gradus_lm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static gd_ctx *ctx;

#define EXPECT(c)                     \
    do {                              \
        if (!(c)) __builtin_trap();   \
    } while (0)

static void one_file(const uint8_t *data, size_t size)
{
    gd_ctx_clear_error(ctx);
    gd_st_file *f = (gd_st_file *)&ctx; /* must be overwritten */
    gd_status st = gd_st_open_mem(ctx, "fuzz.safetensors", data, size, &f);
    if (st != GD_OK) {
        EXPECT(f == NULL);
        EXPECT(st == GD_ERR_FORMAT || st == GD_ERR_UNSUPPORTED || st == GD_ERR_NOMEM);
        EXPECT(strncmp(gd_ctx_error(ctx), "fuzz.safetensors: ", 18) == 0);
        return;
    }
    EXPECT(f != NULL && size >= 8);
    size_t covered = 0;
    for (int i = 0; i < gd_st_count(f); i++) {
        const char *name = gd_st_name(f, i);
        EXPECT(name != NULL);
        gd_dtype dt;
        int nd = -1;
        int64_t shape[GD_MAX_DIMS];
        const void *p = NULL;
        size_t bytes = 0;
        EXPECT(gd_st_find(f, name, &dt, &nd, shape, &p, &bytes));
        EXPECT(nd >= 0 && nd <= GD_MAX_DIMS);
        size_t want = gd_dtype_size(dt);
        EXPECT(want > 0);
        for (int d = 0; d < nd; d++) {
            EXPECT(shape[d] >= 0);
            EXPECT(!__builtin_mul_overflow(want, (size_t)shape[d], &want));
        }
        EXPECT(want == bytes);
        const uint8_t *b = p;
        EXPECT(b >= data && b + bytes <= data + size);
        volatile uint8_t sink = 0;
        for (size_t k = 0; k < bytes; k++) sink ^= b[k];
        (void)sink;
        covered += bytes;
    }
    /* the ranges tile the data: their sizes add up to at most what follows the header */
    EXPECT(covered <= size - 8);
    EXPECT(gd_st_name(f, gd_st_count(f)) == NULL);
    const char *fmt = gd_st_metadata(f, "format");
    if (fmt != NULL) EXPECT(strlen(fmt) < size);
    gd_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL &&
        gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK)
        return 0;
    one_file(data, size);
    const uint8_t *nul = memchr(data, 0, size);
    if (nul != NULL) {
        size_t h = (size_t)(nul - data), rest = size - h - 1;
        uint8_t *file = malloc(8 + h + rest);
        if (file == NULL) return 0;
        for (int i = 0; i < 8; i++) file[i] = (uint8_t)((uint64_t)h >> (8 * i));
        memcpy(file + 8, data, h);
        memcpy(file + 8 + h, nul + 1, rest);
        one_file(file, 8 + h + rest);
        free(file);
    }
    return 0;
}
