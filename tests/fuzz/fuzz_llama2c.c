/* libFuzzer target for llama2.c checkpoints (gd_l2c_parse): any bytes must be refused with
 * a message naming the file, or describe a model whose every weight lies inside the bytes
 * given: the config passes gd_lm_config_check, and the embedding, the first layer's q and
 * k projections (read with their rows reordered) and the final norm load into tensors of
 * their shapes.
 *
 * Built and run by CMake with -DGRADUS_FUZZ=ON (clang); seeds in tests/fuzz/corpus/llama2c.
 */
#include "gradus_lm.h"
#include "llama2c.h"

#include <stdint.h>
#include <string.h>

static gd_ctx *ctx;

#define EXPECT(c)                   \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

static void load(gd_l2c *m, gd_graph *g, const char *name, int64_t rows, int64_t cols)
{
    gd_tensor *t = cols > 0 ? gd_input(g, name, GD_F32, 2, (int64_t[]){rows, cols}) : gd_input(g, name, GD_F32, 1, &rows);
    EXPECT(t != NULL);
    EXPECT(gd_l2c_load(ctx, m, name, t) == GD_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL && gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK)
        return 0;
    gd_l2c *m = NULL;
    gd_lm_config cfg;
    if (gd_l2c_parse(ctx, "fuzz.bin", data, size, &m, &cfg) != GD_OK) {
        EXPECT(strstr(gd_ctx_error(ctx), "fuzz.bin") != NULL);
        return 0;
    }
    EXPECT(gd_lm_config_check(ctx, &cfg) == GD_OK);
    gd_graph *g = gd_graph_new(ctx);
    int64_t hd = cfg.dim / cfg.n_heads;
    load(m, g, "model.embed_tokens.weight", cfg.vocab_size, cfg.dim);
    load(m, g, "model.layers.0.self_attn.q_proj.weight", cfg.dim, cfg.dim);
    load(m, g, "model.layers.0.self_attn.k_proj.weight", cfg.n_kv_heads * hd, cfg.dim);
    load(m, g, "model.norm.weight", cfg.dim, 0);
    gd_graph_free(g);
    gd_l2c_close(m);
    return 0;
}
