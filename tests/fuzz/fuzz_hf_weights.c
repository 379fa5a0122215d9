/* libFuzzer target for model.safetensors.index.json (gd_hf_index_parse): any bytes must be
 * refused with a message naming the file, or give a weight map whose every shard is a
 * plain, non-empty file name (no '/', not "." or "..") and whose names are strings.
 *
 * The reader is hf_weights.c. Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in
 * tests/fuzz/corpus/hf_weights.
 */
#include "gradus_lm.h"
#include "hf_weights.h"

#include <stdint.h>
#include <string.h>

static gd_ctx *ctx;

#define EXPECT(c)                   \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL && gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK)
        return 0;
    gd_hf_index x;
    gd_status s = gd_hf_index_parse(ctx, "fuzz.index.json", (const char *)data, size, &x);
    if (s != GD_OK) {
        EXPECT(strstr(gd_ctx_error(ctx), "fuzz.index.json") != NULL);
        return 0;
    }
    for (int i = 0; i < x.n; i++) {
        EXPECT(x.names[i] != NULL && x.files[i] != NULL && x.files[i][0] != '\0');
        EXPECT(strchr(x.files[i], '/') == NULL && strcmp(x.files[i], ".") != 0 && strcmp(x.files[i], "..") != 0);
    }
    gd_hf_index_free(&x);
    return 0;
}
