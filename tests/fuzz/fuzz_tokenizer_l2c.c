/* libFuzzer target for llama2.c's tokenizer.bin (gd_tokenizer_from_l2c): any bytes must be
 * refused with a message naming the file, or give a tokenizer with which a fixed text
 * (ASCII, accented letters, a character no small vocabulary has) encodes and decodes back
 * to itself, after the dummy space when the vocabulary has a space piece.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/tokenizer_l2c.
 */
#include "bpe.h"
#include "gradus_lm.h"

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
    gd_tokenizer *t = NULL;
    if (gd_tokenizer_from_l2c(ctx, "fuzz.bin", data, size, &t) != GD_OK) {
        EXPECT(strstr(gd_ctx_error(ctx), "fuzz.bin") != NULL);
        return 0;
    }
    static const char text[] = "Once upon a t\xc3\xafme, ab abc \xe2\x98\x83 42\n";
    int32_t *ids = NULL;
    size_t n = 0;
    EXPECT(gd_tokenizer_encode(ctx, t, (const uint8_t *)text, sizeof text - 1, &ids, &n) == GD_OK);
    uint8_t *back = NULL;
    size_t bl = 0;
    EXPECT(gd_tokenizer_decode(ctx, t, ids, n, &back, &bl) == GD_OK);
    size_t pre = gd_bpe_lookup(t, (const uint8_t *)" ", 1) >= 0 ? 1 : 0;
    EXPECT(bl == sizeof text - 1 + pre && memcmp(back + pre, text, sizeof text - 1) == 0);
    gd_free_mem(back);
    gd_free_mem(ids);
    gd_tokenizer_free(t);
    return 0;
}
