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
 * the field. The post-processor (a BOS template) is not applied by encoding.
 * Also reads llama2.c's tokenizer.bin (scores and pieces; any file not starting with '{'):
 * encoding then does as llama2.c's run.c, <s> first and a space before the text, and such
 * a tokenizer cannot be saved as tokenizer.json. */
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
 * advance pos (a new epoch when one is done). Validation batches are fixed: batch
 * pos->index (0 when pos is NULL) holds the split's windows [index*B, index*B + B), in
 * order, wrapping around the split; pos is not advanced. It is an error if a split is
 * shorter than one window. */
gd_status gd_token_data_batch(gd_token_data *d, int split, int64_t B, int64_t T, gd_data_pos *pos, int32_t *x,
                              int32_t *y);

/* ---- safetensors ---------------------------------------------------------------------- */

/* The format: an 8-byte little-endian header length N, N bytes of JSON naming each
 * tensor's dtype, shape and [begin, end) byte range in the data that follows, and the
 * data. Tensor dtypes map to gd_dtype: F32, F16, BF16, F64, I64, I32, U8, I8, BOOL; other
 * safetensors dtypes (F8_*, U16, ...) are refused by name. */
typedef struct gd_st_file gd_st_file;
/* Opens and validates a safetensors file before trusting any size in it: the header
 * length (at most 100 MB and inside the file), the header JSON, each tensor's dtype,
 * shape (at most GD_MAX_DIMS non-negative dims whose byte count matches its range) and
 * data offsets (inside the data, the ranges covering it exactly with no overlap or gap,
 * as the reference reader requires), names unique, and __metadata__ an object of strings.
 * The file is mapped where it can be (read otherwise) and stays so until gd_st_close. */
gd_status gd_st_open(gd_ctx *ctx, const char *path, gd_st_file **out);
/* The same for a file already in memory: `data` is not copied and must outlive the
 * gd_st_file; `name` (may be NULL) names it in messages. */
gd_status gd_st_open_mem(gd_ctx *ctx, const char *name, const void *data, size_t n, gd_st_file **out);
void gd_st_close(gd_st_file *f);
/* Tensors in the order of the header (0 for NULL). */
int gd_st_count(const gd_st_file *f);
const char *gd_st_name(const gd_st_file *f, int i); /* NULL when i is out of range */
/* The tensor called name: dtype, dims (shape has room for GD_MAX_DIMS), and its bytes
 * (valid until close). Any output pointer may be NULL. Returns 1 if found, 0 if absent.
 * The data is little-endian and, in files other writers made, not necessarily aligned
 * to its element size: copy it out (memcpy) rather than cast the pointer. */
int gd_st_find(const gd_st_file *f, const char *name, gd_dtype *dt, int *ndim, int64_t *shape, const void **data,
               size_t *bytes);
const char *gd_st_metadata(const gd_st_file *f, const char *key); /* __metadata__ entry or NULL */

typedef struct gd_st_entry {
    const char *name;
    gd_dtype dtype;
    int ndim;
    int64_t shape[GD_MAX_DIMS];
    const void *data; /* host bytes, numel * dtype size (may be NULL when that is 0) */
} gd_st_entry;
/* Writes tensors in the order given, back to back after a header padded with spaces to a
 * multiple of 8 bytes (tensors are aligned to their element size when the caller orders
 * them by falling element size), with string metadata pairs (may be 0). Names must be
 * unique, non-empty UTF-8 and not "__metadata__". Written atomically: a temporary file in
 * the same directory, flushed to disk and renamed over path; on failure path is left as
 * it was and the message names the file and the tensor. */
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
    int attn_bias;          /* llama family: the q, k and v projections have biases (Qwen2);
                               a model builder that has none must refuse a config that sets it */
    /* Llama 3's RoPE scaling (rope_scaling of rope_type "llama3"), on when rope_factor > 0:
     * frequencies whose wavelength exceeds original_max / low_freq_factor are divided by
     * rope_factor, those under original_max / high_freq_factor kept, those between blended */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max;
} gd_lm_config;

/* "tiny", "stories15m", "stories42m", "stories110m", "qwen3-0.6b-shape", "gpt2-124m"; an
 * unknown name is refused with the list. The result has passed gd_lm_config_check. */
gd_status gd_lm_preset(gd_ctx *ctx, const char *name, gd_lm_config *out);
/* Fills the derived fields (n_kv_heads, head_dim, hidden_dim, vocab_padded where 0) and
 * checks that the dims agree, naming the field that does not: sizes positive, dim
 * divisible by n_heads when head_dim is derived, n_kv_heads dividing n_heads, head_dim
 * even for RoPE, vocab_padded >= vocab_size, GPT-2's heads spanning dim, and a parameter
 * count that fits int64. */
gd_status gd_lm_config_check(gd_ctx *ctx, gd_lm_config *cfg);
/* Parameters of the model a checked config describes (the Hugging Face model's count:
 * biases and norms included, the output projection once when tied); -1 when the config
 * does not pass gd_lm_config_check. */
int64_t gd_lm_param_count(const gd_lm_config *cfg);
/* Hugging Face config.json: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
 * GPT2LMHeadModel. Keys absent take the defaults of the transformers config class; a key
 * that would change the model's function in a way gradus does not compute (rope scaling,
 * sliding windows, biases it lacks, another activation, quantized weights, an unknown
 * architecture) is refused naming the key. The result has passed gd_lm_config_check. */
gd_status gd_lm_config_read(gd_ctx *ctx, const char *path, gd_lm_config *out);
/* The same for config.json text in memory; `name` (may be NULL) names it in messages. */
gd_status gd_lm_config_parse(gd_ctx *ctx, const char *json, size_t n, const char *name, gd_lm_config *out);
/* Writes config.json (atomically) that transformers loads into the class the config
 * belongs to (llama: LlamaForCausalLM, with qk_norm Qwen3ForCausalLM, with attn_bias
 * Qwen2ForCausalLM; GPT-2: GPT2LMHeadModel) with the same shapes: vocab_size is the padded
 * row count, and the unpadded size goes in "gradus_vocab_size" for gd_lm_config_read.
 * Refuses a config that class cannot express, naming the field. */
gd_status gd_lm_config_write(gd_ctx *ctx, const gd_lm_config *cfg, const char *path);

/* The model's forward pass in g: ids (B, T) i32 -> logits (B, T, vocab_size), making its
 * parameters (f32, named as Hugging Face names them, initialized as it does by
 * gd_graph_init_params). Activations are in `dtype` (f32, bf16 or f16; parameters are
 * cast where used, as autocast does). pos (an i32 scalar tensor, NULL for 0) is the
 * position of the first token (RoPE models). cfg must have been checked. */
gd_tensor *gd_lm_forward(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos, gd_dtype dtype);
/* The same with a KV cache: each layer's keys and values are written into states
 * "cache.<layer>.k" and "cache.<layer>.v" ((B, Hkv, cache_len, hd), the compute dtype) at
 * position pos, and attention reads the first kv_len positions of them (an i32 scalar,
 * normally pos + T): a decoder's step. pos and kv_len may also be (B) vectors, a position
 * and a length per sequence of the batch. pos and kv_len are runtime values, so one compiled
 * program serves every position. A second call over the same graph (another T) shares the
 * parameters and the cache. Being for inference, it makes the parameters in `dtype` too
 * (no f32 master weights): a bf16 model's weights are read at their own width. */
gd_tensor *gd_lm_forward_cached(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos,
                                gd_tensor *kv_len, int64_t cache_len, gd_dtype dtype);
/* Weights of the projections (and of a llama's output head) for inference: as stored,
 * int8 with one f32 scale per output channel (GD_LM_INT8), or that with each token's
 * activations quantized to int8 too (GD_LM_W8A8); embeddings and norms stay in the compute
 * dtype. */
typedef enum gd_lm_quant { GD_LM_FLOAT = 0, GD_LM_INT8 = 1, GD_LM_W8A8 = 2 } gd_lm_quant;
/* gd_lm_forward_cached (cache_len 0: no cache) with the projections quantized: each is an
 * i8 parameter under the weight's name, beside a state "<name>.q8_scale" (out) f32, which
 * gd_lm_checkpoint_load fills by quantizing the stored float weights row by row
 * (gradus_semantics.h); GPT-2's Conv1D weights, stored (in, out), are quantized per
 * output channel too, their scales named "<name>.q8_scale_in_out". A llama's head is the i8
 * parameter lm_head.weight, loaded from the embedding when the two are tied. */
gd_tensor *gd_lm_forward_quant(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *pos, gd_tensor *kv_len,
                               int64_t cache_len, gd_dtype dtype, gd_lm_quant quant);
/* Mean cross-entropy of logits (B, T, V) against targets (B, T), computed in f32. */
gd_tensor *gd_lm_loss(gd_tensor *logits, gd_tensor *targets);
/* gd_lm_loss(gd_lm_forward_quant(g, cfg, ids, NULL, NULL, 0, dtype, quant), targets), the
 * same loss and gradients, taken on the output head's logits with their padding columns
 * (vocab_padded past vocab_size) left out by the loss rather than sliced off: a training
 * or evaluation graph then neither copies the slice nor scatters its gradient back. */
gd_tensor *gd_lm_forward_loss(gd_graph *g, const gd_lm_config *cfg, gd_tensor *ids, gd_tensor *targets, gd_dtype dtype,
                              gd_lm_quant quant);

/* ---- training ---------------------------------------------------------------------- */

typedef struct gd_lm_progress {
    int64_t step, steps;         /* the step just done (1-based) and the last one */
    double loss, lr, grad_norm;  /* of that step (loss: mean over its micro-batches) */
    double val_loss;             /* measured after this step, NaN when not */
    double tokens_per_s;         /* over this run so far */
    double elapsed_s, eta_s;
    /* with loss scaling (gd_loss_scale_config): the scale the next step will use, the steps
     * skipped so far, and whether this one was (its grad_norm is then NaN); 0 without */
    double loss_scale;
    int64_t skipped_steps;
    int skipped;
} gd_lm_progress;

/* Loss scaling, against gradients too small for f16: the loss's gradient is multiplied by
 * a scale before the backward pass and the gradients divided by it (in f32) before
 * clipping and the update. A step whose scaled gradients are not all finite (their global
 * norm is inf or NaN) is skipped: the parameters, AdamW's moments and its step count stay
 * as they were, and the data and the learning-rate schedule move on. Dynamic scaling then
 * multiplies the scale by `backoff`, and by `growth` after `growth_interval` steps in a
 * row that were not skipped (PyTorch's GradScaler). The scale is a runtime value: changing
 * it never recompiles. A run resumed from a checkpoint continues with its scale. */
typedef enum gd_loss_scaling {
    GD_LOSS_SCALE_AUTO = 0,    /* dynamic for f16, off for f32 and bf16 */
    GD_LOSS_SCALE_OFF = 1,     /* no scaling, no step skipped */
    GD_LOSS_SCALE_FIXED = 2,   /* `init` throughout (steps with inf or NaN still skipped) */
    GD_LOSS_SCALE_DYNAMIC = 3
} gd_loss_scaling;
typedef struct gd_loss_scale_config {
    gd_loss_scaling mode;
    double init;                 /* the first scale; 0: 65536 */
    double growth;               /* 0: 2 (above 1) */
    double backoff;              /* 0: 0.5 (between 0 and 1) */
    int64_t growth_interval;     /* 0: 2000 */
} gd_loss_scale_config;

typedef struct gd_lm_train_config {
    gd_lm_config model;          /* checked */
    gd_token_data *data;
    const gd_tokenizer *tokenizer; /* saved with each checkpoint; may be NULL */
    int64_t steps;               /* optimizer steps; 0: 100 */
    int64_t stop_at;             /* end this run after that step (the schedule still spans
                                    `steps`, so a resumed run continues it); 0: steps */
    int64_t batch, seq;          /* 0: 8, the model's max_seq */
    int64_t grad_accum;          /* micro-batches per step; 0: 1 */
    double lr;                   /* peak learning rate; 0: 1e-3 */
    double min_lr;               /* end of the cosine decay; 0: lr / 10 */
    int64_t warmup;              /* steps of linear warmup */
    double weight_decay;         /* AdamW's, on every parameter */
    double beta1, beta2;         /* 0: 0.9, 0.95 */
    double clip;                 /* clip gradients to this global norm; 0: none */
    int64_t val_every;           /* steps between validations; 0: at the end only */
    int64_t val_batches;         /* batches of the validation split per validation; 0: 8 */
    int64_t ckpt_every;          /* steps between checkpoints; 0: at the end only */
    const char *out_dir;         /* checkpoints and metrics.jsonl; NULL: neither */
    const char *resume_dir;      /* continue from the latest checkpoint there */
    gd_dtype dtype;              /* activations: f32 (default) or bf16 / f16 with f32 weights */
    uint64_t seed;               /* initialization and data order (ignored when resuming) */
    double report_every_s;       /* 0: 1 */
    void (*progress)(void *user, const gd_lm_progress *p);
    void *user;
    /* Data parallelism (gradus_dist.h): this process's membership in a job of N ranks, or
     * NULL for one process. Each rank trains `grad_accum` micro-batches of `batch` per
     * step, rank r taking the r-th slice of the global batch of N x grad_accum x batch
     * windows, and the ranks sum their gradients before the update: the losses are those
     * of one process accumulating N x grad_accum micro-batches (bit for bit when
     * grad_accum is 1). Rank 0 alone writes checkpoints and metrics; every rank calls
     * `progress` with the same figures. */
    struct gd_dist *dist;
    int zero1;                   /* with dist: each rank keeps AdamW's moments of about 1/N of the
                                    parameters (ZeRO stage 1) and sends the others what it updated */
    gd_loss_scale_config loss_scale; /* zeros: dynamic for f16, none otherwise */
} gd_lm_train_config;

typedef struct gd_lm_train_result {
    int64_t steps;               /* the last step done */
    double train_loss, val_loss; /* the last measured (val: NaN if never) */
    double tokens_per_s;
    int saw_nan;                 /* a loss was not finite: training stopped there */
    size_t activation_bytes;     /* the training step's planned memory on the preferred backend */
    char checkpoint[1024];       /* the last checkpoint written, "" if none */
    char metrics[1024];          /* the metrics log, "" if none */
    /* memory this rank holds for training, besides activations (bytes) */
    size_t param_bytes;          /* the model's parameters */
    size_t grad_bytes;           /* gradient buffers beyond the backward pass's (accumulation, exchange) */
    size_t optimizer_bytes;      /* AdamW's moments kept by this rank */
    int ranks;                   /* processes that trained (1 without dist) */
    char summed_on[32];          /* with dist: where the ranks' gradients were summed: "host" ("host,
                                    during the backward" when overlapped with it), or the backend
                                    whose collective module did it ("cuda", "cuda, during the
                                    backward") */
    double loss_scale;           /* with loss scaling: the scale at the end (0 without) */
    int64_t skipped_steps;       /* steps whose update was skipped (inf or NaN gradients) */
} gd_lm_train_result;

/* Trains with AdamW, a linear warmup and a cosine decay (the learning rate is a runtime
 * value: changing it never recompiles), gradient clipping and accumulation, and loss
 * scaling (gd_loss_scale_config; on by default for f16). With
 * out_dir, it writes checkpoints there — each a directory ckpt-<step> holding
 * config.json, model.safetensors and tokenizer.json (a model directory `transformers`
 * loads) plus optimizer.safetensors and trainer.json, made in a temporary directory and
 * renamed, then named by the file `latest` (replaced atomically): a run killed while
 * writing leaves the previous checkpoint whole — and metrics.jsonl, a JSON object per
 * step. Resuming continues so that the losses equal an uninterrupted run's bit for bit
 * on a deterministic backend. */
gd_status gd_lm_train(gd_ctx *ctx, const gd_lm_train_config *cfg, gd_lm_train_result *out);

/* ---- sampling and generation ----------------------------------------------------------- */

typedef struct gd_sample_config {
    double temperature;  /* 0: greedy (the highest logit, the lowest id among equals) */
    int64_t top_k;       /* keep the k most likely; 0: all */
    double top_p;        /* keep the smallest set of most likely tokens holding this mass; 0: all */
    uint64_t seed;       /* draw i uses the counter-based generator at (i, seed): same tokens everywhere */
} gd_sample_config;
/* Picks a token from logits (V of them) with draw number `counter`; scratch holds
 * gd_lm_sample_scratch(V) bytes. */
int32_t gd_lm_sample(const float *logits, int64_t V, const gd_sample_config *c, uint64_t counter, void *scratch);
size_t gd_lm_sample_scratch(int64_t V);
/* The same inside a program: the next token (B) i32 of each row of logits (B, V), row b
 * drawing number draw[b] (an i32/i64 (B) tensor, so a runtime value): a decoder then reads
 * back one id per sequence, not a row of logits. The sampling settings are fixed in the
 * node. */
gd_tensor *gd_sample(gd_tensor *logits, gd_tensor *draw, const gd_sample_config *c);
/* A decode step's feedback, in place (an update: it runs where a program targets its
 * outputs, or with GD_COMPILE_UPDATES): ids (B, 1) or (B) take tok (B), the tokens just
 * sampled, and pos, kv_len (scalars or (B)) and draw (B) each go one further, so the next
 * run of the step needs nothing from the host. out gets the four new values, in that order. */
gd_status gd_decode_advance(gd_tensor *tok, gd_tensor *ids, gd_tensor *pos, gd_tensor *kv_len, gd_tensor *draw,
                            gd_tensor **out);

typedef struct gd_lm_generate_config {
    int64_t max_tokens;              /* to add after the prompt; 0: 64 (and the model's positions bound it) */
    gd_sample_config sample;
    const int32_t *stop_ids;         /* ends generation after emitting one of these */
    int n_stop;
    void (*on_token)(void *user, int32_t id); /* each token as it is made */
    void *user;
    int recompute;                   /* 1: no KV cache, the whole window recomputed per token */
    int use_dtype;                   /* 0: compute in the dtype the model's weights are stored in */
    gd_dtype dtype;                  /* with use_dtype: f32, bf16 or f16 */
    gd_lm_quant quantize;            /* projections over int8 weights */
    double prefill_s, decode_s;      /* written: seconds spent on the prompt and on the new tokens */
} gd_lm_generate_config;
/* Continues `prompt` with the model of a checkpoint (or training) directory through the
 * inference engine (or, with `recompute`, by recomputing the window for each token: the
 * same tokens, the check of the cache); *out (free with gd_free_mem) holds prompt and
 * continuation. */
gd_status gd_lm_generate(gd_ctx *ctx, const char *model_dir, const int32_t *prompt, int64_t n_prompt,
                         gd_lm_generate_config *c, int32_t **out, int64_t *n_out);

/* ---- evaluation ---------------------------------------------------------------------- */

typedef struct gd_lm_eval_config {
    int64_t seq;        /* positions per window; 0: the model's max_seq, at most 256 */
    int64_t batch;      /* windows per run; 0: 8 */
    gd_dtype dtype;     /* activations: GD_F32 (0 means f32), GD_BF16 or GD_F16; weights stay f32 */
    int64_t max_tokens; /* stop after this many predicted tokens; 0: all */
    gd_lm_quant quantize; /* int8 projections (the weights quantized at load) */
} gd_lm_eval_config;
typedef struct gd_lm_eval_result {
    int64_t tokens;     /* tokens predicted */
    double nll;         /* mean negative log-likelihood, nats per token */
    double perplexity;  /* exp(nll) */
} gd_lm_eval_result;
/* The model at `where` (as gd_lm_model_config takes) on token ids: consecutive windows of
 * seq + 1 tokens, each predicting its last seq from those before (a window's first token is
 * context only); the mean loss over every predicted token. A tail shorter than a window is
 * left out. */
gd_status gd_lm_evaluate(gd_ctx *ctx, const char *where, const int32_t *ids, int64_t n, const gd_lm_eval_config *c,
                         gd_lm_eval_result *out);

/* ---- the inference engine -------------------------------------------------------------- */

/* A model loaded for generation: a prefill program (chunks of prompt tokens) and a decode
 * program (one token) compiled over one graph, sharing the weights and a KV cache of
 * max_len positions. Positions and lengths are runtime values: no recompilation per
 * token. One sequence, or a batch of them decoded together, each at its own position. */
typedef struct gd_lm_engine gd_lm_engine;
typedef struct gd_lm_engine_config {
    int64_t max_len; /* positions the cache holds; 0: the model's max_seq */
    int64_t chunk;   /* prompt tokens per prefill run; 0: 64 */
    int use_dtype;   /* 0: weights, activations and cache in the dtype the model's files
                      * store (gd_lm_model_dtype); 1: in `dtype` */
    gd_dtype dtype;  /* f32, bf16 or f16 */
    gd_lm_quant quantize;
    int64_t batch;   /* sequences decoded together (the _batch calls); 0: 1 */
} gd_lm_engine_config;
gd_status gd_lm_engine_open(gd_ctx *ctx, const char *model_dir, const gd_lm_engine_config *c, gd_lm_engine **out);
const gd_lm_config *gd_lm_engine_model(const gd_lm_engine *e);
/* Starts a sequence with the n prompt tokens; *logits (vocab_size floats, valid until the
 * next call) are those after the last of them. */
gd_status gd_lm_engine_prefill(gd_lm_engine *e, const int32_t *ids, int64_t n, const float **logits);
/* Appends one token; *logits are those after it. */
gd_status gd_lm_engine_step(gd_lm_engine *e, int32_t id, const float **logits);
/* Appends one token and samples the one after it on the backend (gd_sample: the same
 * token gd_lm_sample picks from gd_lm_engine_step's logits with draw number = its position),
 * reading back only its id. The first use of a sampling setting compiles a program. */
gd_status gd_lm_engine_next(gd_lm_engine *e, int32_t id, const gd_sample_config *c, int32_t *next);
/* Tokens in the sequence so far. */
int64_t gd_lm_engine_length(const gd_lm_engine *e);
/* A batch: starts B sequences with their prompts (prompt b holds n[b] >= 1 tokens; the
 * lengths may differ); *logits (B x vocab_size floats, valid until the next call) are each
 * sequence's after its last token. */
gd_status gd_lm_engine_prefill_batch(gd_lm_engine *e, const int32_t *const *prompts, const int64_t *n,
                                     const float **logits);
/* Appends ids[b] to sequence b (a negative id leaves sequence b as it is: a finished one);
 * *logits as above (an idle sequence's row keeps its last logits). */
gd_status gd_lm_engine_step_batch(gd_lm_engine *e, const int32_t *ids, const float **logits);
/* The same, sampling each sequence's next token on the backend into next[b]: draw number
 * p + b * 2^40 for the token that will take position p (sequence 0 draws as a single
 * sequence does; the others from streams of their own); an idle sequence's is meaningless. */
gd_status gd_lm_engine_next_batch(gd_lm_engine *e, const int32_t *ids, const gd_sample_config *c, int32_t *next);
/* Decodes up to n steps with the sampled tokens fed back on the backend: step 0 appends
 * ids[b] to sequence b, each later step the token the step before sampled, and every step
 * samples each sequence's next token as gd_lm_engine_next_batch does (the same draws, so
 * the same tokens). Nothing passes through the host between steps: a few are queued ahead
 * and their tokens read back together, then handed to on_step(user, next) in order, B of
 * them a step. A nonzero return ends decoding after that step; the steps queued past it
 * are not counted (the sequences' lengths are as if they never ran). Every sequence takes
 * part in every step; each must have room for n more positions. */
typedef int (*gd_lm_step_fn)(void *user, const int32_t *next);
gd_status gd_lm_engine_decode(gd_lm_engine *e, const int32_t *ids, const gd_sample_config *c, int64_t n,
                              gd_lm_step_fn on_step, void *user);
/* Tokens in sequence b so far. */
int64_t gd_lm_engine_length_of(const gd_lm_engine *e, int64_t b);
void gd_lm_engine_free(gd_lm_engine *e);

/* ---- checkpoints ------------------------------------------------------------------- */

/* Where training is, besides the graph's parameters and optimizer states: what a resumed
 * run needs to continue bit for bit. */
typedef struct gd_lm_state {
    int64_t step;      /* optimizer steps done */
    gd_data_pos pos;   /* the training data reader's position */
    uint64_t seed;     /* the run's seed */
    /* loss scaling (gd_loss_scale_config), saved in trainer.json when loss_scale > 0: the
     * scale, the steps since it last changed or a step was skipped, the steps skipped */
    double loss_scale;
    int64_t scale_good_steps, skipped_steps;
} gd_lm_state;

/* Writes checkpoint ckpt-<step> under out_dir (the layout and atomicity gd_lm_train
 * describes) with every parameter of g and the states AdamW and the trainer keep;
 * `written` (may be NULL) gets its path. tok may be NULL. */
gd_status gd_lm_checkpoint_save(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const gd_tokenizer *tok,
                                const gd_lm_state *st, const char *out_dir, char *written, size_t cap);
/* Loads a checkpoint into g, whose model must have the checkpoint's shapes: parameters
 * always, optimizer states and the training state when with_optimizer (st may be NULL
 * otherwise). `where` is a checkpoint or a training directory (its latest). */
gd_status gd_lm_checkpoint_load(gd_ctx *ctx, gd_graph *g, const gd_lm_config *cfg, const char *where,
                                int with_optimizer, gd_lm_state *st);
/* The model at `where`: a checkpoint or training directory, a Hugging Face model
 * directory (config.json and its safetensors), or a llama2.c checkpoint file (.bin, its
 * legacy or version 1 header). The result has passed gd_lm_config_check.
 * gd_lm_checkpoint_load (without the optimizer) and the engine take all three. */
gd_status gd_lm_model_config(gd_ctx *ctx, const char *where, gd_lm_config *cfg);
/* The dtype the weights of the model at `where` (as gd_lm_model_config takes) are stored
 * in: its token embedding's (f32 for llama2.c files). */
gd_status gd_lm_model_dtype(gd_ctx *ctx, const char *where, gd_dtype *out);
/* The checkpoint directory `dir` stands for: itself if it holds config.json, else the one
 * its `latest` file names. */
gd_status gd_lm_checkpoint_resolve(gd_ctx *ctx, const char *dir, char *path, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_LM_H */
