/* llama2c.h — checkpoints of llama2.c (Karpathy's `run.c` format): the legacy file (a
 * 7-int header) and the versioned one (magic "ak42", version 1, a 256-byte header), f32
 * weights, read as the llama family with Hugging Face's parameter names. */
#ifndef GD_IO_LLAMA2C_H
#define GD_IO_LLAMA2C_H

#include "gradus_lm.h"

typedef struct gd_l2c gd_l2c;

/* Whether the file at path starts like a llama2.c checkpoint (either header). */
int gd_l2c_sniff(const char *path);
/* Opens (maps) a checkpoint file and checks its header and size; *cfg gets the model. */
gd_status gd_l2c_open(gd_ctx *ctx, const char *path, gd_l2c **out, gd_lm_config *cfg);
/* The same over bytes in memory (not copied; they must outlive the result). */
gd_status gd_l2c_parse(gd_ctx *ctx, const char *name, const void *data, size_t n, gd_l2c **out, gd_lm_config *cfg);
/* Writes the tensor of Hugging Face name `name` into t (f32, its shape): q and k
 * projections have their rows reordered from llama2.c's interleaved rotary pairs to
 * Hugging Face's halves. An unknown name is an error naming the file. */
gd_status gd_l2c_load(gd_ctx *ctx, const gd_l2c *m, const char *name, gd_tensor *t);
void gd_l2c_close(gd_l2c *m);

#endif
