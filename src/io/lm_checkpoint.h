/* lm_checkpoint.h — the parts of lm_checkpoint.c that tests and the fuzz target reach
 * without a checkpoint directory. */
#ifndef GD_LM_CHECKPOINT_H
#define GD_LM_CHECKPOINT_H

#include "gradus_lm.h"

#include <stddef.h>

/* Parses a checkpoint's trainer.json (n bytes of text; path names it in messages) into
 * *st: step, seed and data position. Anything else is GD_ERR_FORMAT naming the file. */
gd_status gd_lm_state_parse(gd_ctx *ctx, const char *path, const char *text, size_t n, gd_lm_state *st);

/* gd_lm_checkpoint_save with n_extra more entries in optimizer.safetensors: the optimizer
 * states this process holds on the host rather than in g (a sharded optimizer's). */
gd_status gd_lm_checkpoint_save_with(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const gd_tokenizer *tok,
                                     const gd_lm_state *st, const char *out_dir, const gd_st_entry *extra, int n_extra,
                                     char *written, size_t cap);

#endif
