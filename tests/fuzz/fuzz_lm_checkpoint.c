/* fuzz_lm_checkpoint.c — libFuzzer target: a checkpoint's trainer.json (step, seed and
 * data position, src/io/lm_checkpoint.c), on arbitrary bytes. A state that parses has a
 * step, epoch and index that are not negative; a refusal names the file. No crash, no
 * leak, no undefined behaviour.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/lm_checkpoint.
 */
#include "gradus_lm.h"
#include "io/lm_checkpoint.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static gd_ctx *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL && gd_ctx_create(&ctx, NULL) != GD_OK) abort();
    gd_lm_state st = {0};
    gd_status s = gd_lm_state_parse(ctx, "trainer.json", (const char *)data, size, &st);
    if (s == GD_OK) {
        if (st.step < 0 || st.pos.epoch < 0 || st.pos.index < 0) abort();
    } else if (s != GD_ERR_FORMAT && s != GD_ERR_NOMEM) {
        abort();
    } else if (strstr(gd_ctx_error(ctx), "trainer.json") == NULL) {
        abort(); /* a refusal must name the file */
    }
    gd_ctx_clear_error(ctx);
    return 0;
}
