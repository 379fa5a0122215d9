/* gradus_lm.h — language models on top of gradus.h: byte-level BPE tokenizers (trained
 * here or read from a Hugging Face tokenizer.json), token datasets, the llama and GPT-2
 * model families with their Hugging Face configs, checkpoints in safetensors, training
 * and sampling.
 *
 * Files gradus writes here are the ones the Python tools read: tokenizer.json loads in
 * `tokenizers`, a checkpoint directory (config.json + model.safetensors) in
 * `transformers`. Every reader refuses a bad file with a message naming the file and what
 * is wrong with it (the tensor, the field, the byte). Memory a function hands out is freed
 * with the function this header names for it.
 */
#ifndef GRADUS_LM_H
#define GRADUS_LM_H

#include "gradus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokenizers ---------------------------------------------------------------------- */

typedef struct gd_tokenizer gd_tokenizer;

/* Trains a byte-level BPE tokenizer on `text` to `vocab_size` tokens: the 256 bytes (id =
 * byte value), the merges learnt, and one special token "<|endoftext|>" (the last id) that
 * separates documents. Text is split before merging as GPT-2's byte-level pre-tokenizer
 * does (letters, digits, punctuation and spaces apart), so tokens never cross those;
 * "<|endoftext|>" in the text is a document boundary, not text to learn. Training is
 * deterministic. A text too small to fill the vocabulary (every word already one token)
 * gives fewer tokens: gd_tokenizer_vocab_size says how many. */
gd_status gd_tokenizer_train(gd_ctx *ctx, const uint8_t *text, size_t n, int32_t vocab_size, gd_tokenizer **out);
/* Reads a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Qwen, Llama 3),
 * or one gd_tokenizer_save wrote: model BPE (merges as "a b" or [a, b]), added tokens, no
 * normalizer or NFC, a ByteLevel pre-tokenizer or a Split on the GPT-2, Llama 3 or Qwen2
 * pattern before one. Anything else that would change the ids (another pattern or
 * normalizer, dropout, single_word tokens) is refused with a message naming the file and
 * the field. The post-processor (a BOS template) is not applied by encoding. */
gd_status gd_tokenizer_load(gd_ctx *ctx, const char *path, gd_tokenizer **out);
/* Writes tokenizer.json (byte-level BPE), which the `tokenizers` library loads and encodes
 * with identically. Written atomically (a temporary file renamed). */
gd_status gd_tokenizer_save(gd_ctx *ctx, const gd_tokenizer *t, const char *path);
void gd_tokenizer_free(gd_tokenizer *t);

/* One past the largest id (added tokens included): the rows a model's embedding needs. */
int32_t gd_tokenizer_vocab_size(const gd_tokenizer *t);
/* The id that ends a document ("<|endoftext|>", "<|im_end|>", ...), or -1. */
int32_t gd_tokenizer_eos(const gd_tokenizer *t);
/* Encodes any bytes (invalid UTF-8 included) as the `tokenizers` library does with
 * add_special_tokens=False: added tokens in the text are matched first, the rest is
 * normalized, pre-tokenized and merged. *ids is allocated (free with gd_free_mem). The
 * tokenizer is only read, so threads may share it. */
gd_status gd_tokenizer_encode(gd_ctx *ctx, const gd_tokenizer *t, const uint8_t *text, size_t n, int32_t **ids,
                              size_t *n_ids);
/* Decodes ids back to the exact bytes encoded; an id outside the vocabulary is an error
 * naming its position. *text is allocated (free with gd_free_mem) and NUL-terminated. */
gd_status gd_tokenizer_decode(gd_ctx *ctx, const gd_tokenizer *t, const int32_t *ids, size_t n, uint8_t **text,
                              size_t *len);
/* The bytes of one token (for streaming output), or NULL for an id outside the vocabulary. */
const uint8_t *gd_tokenizer_token(const gd_tokenizer *t, int32_t id, size_t *len);

/* Frees memory the functions of this header hand out. */
void gd_free_mem(void *p);

/* ---- token data ------------------------------------------------------------------------- */

/* Encodes a corpus into a token file: each path is a file or a directory (walked, in
 * sorted order, reading regular files); each file is a document, and documents are
 * separated by the tokenizer's end-of-document id. Progress goes to `progress` (may be
 * NULL) as bytes done of bytes total. Refuses an empty corpus. */
typedef struct gd_token_file_info {
    int64_t documents, bytes, tokens;
} gd_token_file_info;
gd_status gd_tokens_build(gd_ctx *ctx, const gd_tokenizer *t, const char *const *paths, int n_paths, const char *out_path,
                          void (*progress)(void *user, int64_t done, int64_t total), void *user,
                          gd_token_file_info *info);

typedef struct gd_token_data gd_token_data;
enum { GD_SPLIT_TRAIN = 0, GD_SPLIT_VAL = 1 };
/* Opens a token file; the last val_fraction of its documents (at least one) is the
 * validation split (a corpus of one document: its last val_fraction of tokens; 0: no
 * validation split). A truncated or corrupt file is refused. The context receives the
 * messages of later calls on the data too, so it must outlive it. */
gd_status gd_token_data_open(gd_ctx *ctx, const char *path, double val_fraction, gd_token_data **out);
void gd_token_data_close(gd_token_data *d);
int64_t gd_token_data_tokens(const gd_token_data *d, int split);
int32_t gd_token_data_vocab(const gd_token_data *d); /* the vocabulary size it was encoded with */

/* Where a reader is: training windows are visited in an order shuffled per epoch from
 * `seed`; saving this in a checkpoint and passing it back resumes exactly. */
typedef struct gd_data_pos {
    uint64_t seed;
    int64_t epoch;
    int64_t index; /* next window of the epoch */
} gd_data_pos;
/* Fills x and y (B*T int32 each): B windows of T+1 tokens, y the window shifted by one.
 * Training windows start every T tokens of the split and come in the shuffled order and
 * advance pos (a new epoch when one is done); validation windows are the split's first B,
 * in order, whatever pos says (pos may be NULL), and it is an error if the split is too
 * short for them. */
gd_status gd_token_data_batch(gd_token_data *d, int split, int64_t B, int64_t T, gd_data_pos *pos, int32_t *x,
                              int32_t *y);

/* ---- safetensors ---------------------------------------------------------------------- */

typedef struct gd_st_file gd_st_file;
/* Opens and validates a safetensors file (header length and JSON, dtypes, shapes, offsets
 * inside the file and not overlapping). */
gd_status gd_st_open(gd_ctx *ctx, const char *path, gd_st_file **out);
void gd_st_close(gd_st_file *f);
int gd_st_count(const gd_st_file *f);
const char *gd_st_name(const gd_st_file *f, int i);
/* The tensor called name: dtype, dims, and its bytes (valid until close). 0 if absent. */
int gd_st_find(const gd_st_file *f, const char *name, gd_dtype *dt, int *ndim, int64_t *shape, const void **data,
               size_t *bytes);
const char *gd_st_metadata(const gd_st_file *f, const char *key); /* __metadata__ entry or NULL */

typedef struct gd_st_entry {
    const char *name;
    gd_dtype dtype;
    int ndim;
    int64_t shape[GD_MAX_DIMS];
    const void *data; /* host bytes */
} gd_st_entry;
/* Writes tensors (and string metadata pairs, may be 0) atomically: a temporary file in
 * the same directory, flushed and renamed over path. */
gd_status gd_st_write(gd_ctx *ctx, const char *path, const gd_st_entry *entries, int n, const char *const *meta_keys,
                      const char *const *meta_values, int n_meta);

/* ---- models ------------------------------------------------------------------------------ */

typedef enum gd_lm_arch { GD_LM_LLAMA = 0, GD_LM_GPT2 = 1 } gd_lm_arch;

typedef struct gd_lm_config {
    gd_lm_arch arch;
    int64_t dim;            /* hidden size */
    int64_t n_layers;
    int64_t n_heads;
    int64_t n_kv_heads;     /* 0: n_heads */
    int64_t head_dim;       /* 0: dim / n_heads */
    int64_t hidden_dim;     /* MLP width; 0: llama 4*dim*2/3 rounded up to 256, GPT-2 4*dim */
    int64_t vocab_size;
    int64_t vocab_padded;   /* embedding rows (a multiple of 64 for GPT-2); 0: vocab_size */
    int64_t max_seq;        /* positions (GPT-2's learned table; RoPE models: the longest sequence) */
    double rope_theta;      /* llama */
    double norm_eps;
    int qk_norm;            /* per-head RMSNorm of q and k (Qwen3) */
    int tied_embeddings;    /* the output projection is the embedding table */
} gd_lm_config;

/* "tiny", "stories15m", "stories42m", "stories110m", "qwen3-0.6b-shape", "gpt2-124m". */
gd_status gd_lm_preset(gd_ctx *ctx, const char *name, gd_lm_config *out);
/* Fills the derived fields and checks that the dims agree (dim divisible by heads, kv
 * heads dividing heads, ...), naming the field that does not. */
gd_status gd_lm_config_check(gd_ctx *ctx, gd_lm_config *cfg);
/* Hugging Face config.json: LlamaForCausalLM, Qwen2/Qwen3ForCausalLM, GPT2LMHeadModel. */
gd_status gd_lm_config_read(gd_ctx *ctx, const char *path, gd_lm_config *out);
gd_status gd_lm_config_write(gd_ctx *ctx, const gd_lm_config *cfg, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_LM_H */
