/* hf_weights.h — a model directory's weights as Hugging Face saves them: model.safetensors,
 * or the shards that model.safetensors.index.json maps each tensor to. */
#ifndef GD_IO_HF_WEIGHTS_H
#define GD_IO_HF_WEIGHTS_H

#include "gradus_lm.h"

typedef struct gd_hf_weights gd_hf_weights;

/* Opens the weights of model directory `dir`. */
gd_status gd_hf_weights_open(gd_ctx *ctx, const char *dir, gd_hf_weights **out);
/* Writes tensor `name` into t. f32, f16 and bf16 tensors load into any of the three
 * (widening exactly, narrowing to nearest even); a name
 * starting "transformer." is also looked for without that prefix (GPT2Model's weights, as
 * opposed to GPT2LMHeadModel's). A missing tensor, another shape or another dtype is an
 * error naming the file and the tensor. */
gd_status gd_hf_weights_load(gd_ctx *ctx, gd_hf_weights *w, const char *name, gd_tensor *t);
/* Writes float weights (f32, f16, bf16; bytes of them) into t: converted to t's float
 * dtype, or, for an i8 t (out, in), quantized row by row (gradus_semantics.h) with the
 * scales written into the state "<t's name>.q8_scale" — or, when the state is named
 * "<t's name>.q8_scale_in_out", from a file that holds the matrix (in, out), transposed. */
gd_status gd_weights_write(gd_ctx *ctx, gd_tensor *t, gd_dtype src_dtype, const void *src, size_t bytes);
/* The dtype tensor `name` is stored in (the same lookup as gd_hf_weights_load). */
gd_status gd_hf_weights_dtype(gd_ctx *ctx, gd_hf_weights *w, const char *name, gd_dtype *dt);
void gd_hf_weights_close(gd_hf_weights *w);

/* Parses an index file's text: *map gets weight_map's (tensor name, file name) pairs,
 * every file name a plain name in the same directory. For the fuzzer and the opener. */
typedef struct gd_hf_index {
    void *doc;           /* the parsed JSON */
    int n;
    const char **names;  /* tensor names */
    const char **files;  /* their shard files */
} gd_hf_index;
gd_status gd_hf_index_parse(gd_ctx *ctx, const char *path, const char *text, size_t n, gd_hf_index *out);
void gd_hf_index_free(gd_hf_index *x);

#endif
