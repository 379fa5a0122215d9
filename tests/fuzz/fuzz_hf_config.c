/* libFuzzer target for the config.json reader: any bytes given to gd_lm_config_parse must
 * be refused with a message naming the file, or give a config that passes the check
 * unchanged and has a parameter count. An accepted config that the writer can express
 * must read back identical (written under /dev/shm, where flushing costs nothing).
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/hf_config
 * and dictionary tests/fuzz/hf_config.dict.
 */
#include "gradus_lm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static gd_ctx *ctx;
static char out_path[64];

#define EXPECT(c)                     \
    do {                              \
        if (!(c)) __builtin_trap();   \
    } while (0)

static void remove_output(void) { unlink(out_path); }

static int same(const gd_lm_config *a, const gd_lm_config *b)
{
    return a->arch == b->arch && a->dim == b->dim && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->hidden_dim == b->hidden_dim &&
           a->vocab_size == b->vocab_size && a->vocab_padded == b->vocab_padded && a->max_seq == b->max_seq &&
           a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps && a->qk_norm == b->qk_norm &&
           a->tied_embeddings == b->tied_embeddings && a->attn_bias == b->attn_bias &&
           a->rope_factor == b->rope_factor && a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor && a->rope_original_max == b->rope_original_max;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL) {
        if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK)
            return 0;
        if (access("/dev/shm", W_OK) == 0) {
            snprintf(out_path, sizeof out_path, "/dev/shm/gd-fuzz-%ld.json", (long)getpid());
            atexit(remove_output);
        }
    }
    gd_ctx_clear_error(ctx);
    gd_lm_config c;
    gd_status st = gd_lm_config_parse(ctx, (const char *)data, size, "fuzz.json", &c);
    if (st != GD_OK) {
        EXPECT(st == GD_ERR_FORMAT || st == GD_ERR_UNSUPPORTED || st == GD_ERR_INVALID || st == GD_ERR_NOMEM);
        EXPECT(strncmp(gd_ctx_error(ctx), "fuzz.json: ", 11) == 0);
        return 0;
    }
    gd_lm_config again = c;
    EXPECT(gd_lm_config_check(ctx, &again) == GD_OK && same(&again, &c));
    EXPECT(gd_lm_param_count(&c) > 0);
    if (out_path[0] != '\0' && gd_lm_config_write(ctx, &c, out_path) == GD_OK) {
        gd_lm_config back;
        EXPECT(gd_lm_config_read(ctx, out_path, &back) == GD_OK);
        EXPECT(same(&back, &c));
    }
    return 0;
}
