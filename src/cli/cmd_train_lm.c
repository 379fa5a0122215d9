/* cmd_train_lm.c — `gradus train lm`: trains a language model on text.
 *
 * Text (files or directories) is encoded once into OUT/data.tok with a tokenizer trained
 * on it (saved as OUT/tokenizer.json, which the `tokenizers` library reads), unless a
 * tokenizer file or a token file is given; a resumed run reuses them. Progress goes to
 * stdout a line a second (rewritten in place on a terminal); the end prints the
 * validation loss beside the corpus's unigram entropy, both in bits per byte, and where
 * the checkpoint and the metrics log are.
 *
 * Launched as several ranks (`mpirun -n N`, or RANK/WORLD_SIZE and a rendezvous), each
 * rank trains its slice of every global batch (gradus_dist.h): rank 0 prepares the data
 * and the tokenizer while the others wait, and rank 0 alone prints. */
#include "cli.h"
#include "gradus_dist.h"
#include "gradus_lm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Text read to train a tokenizer and measure the corpus: enough for either, bounded. */
#define SAMPLE_BYTES ((size_t)64 << 20)

static void help(FILE *f)
{
    fprintf(f,
            "usage: gradus train lm [options]\n"
            "\n"
            "Trains a transformer language model (llama or GPT-2 family) on text.\n"
            "\n"
            "  --preset NAME     tiny (default), stories15m, stories42m, stories110m, qwen3-0.6b-shape, gpt2-124m\n"
            "  --config FILE     a Hugging Face config.json (Llama, Qwen2/3, GPT-2) instead of a preset\n"
            "  --data PATH       a text file or a directory of them (repeatable), or a token file (.tok)\n"
            "  --tokenizer FILE  encode with this tokenizer.json (default: train one on the data)\n"
            "  --out DIR         checkpoints, metrics.jsonl, tokenizer.json, data.tok (default lm-out)\n"
            "  --resume DIR      continue the run whose directory this is (its data and tokenizer too)\n"
            "  --steps N         optimizer steps (default 200)\n"
            "  --batch B         sequences per micro-batch (default 8)\n"
            "  --seq T           tokens per sequence (default: the model's positions, at most 256)\n"
            "  --accum K         micro-batches per step (default 1)\n"
            "  --lr X            peak learning rate (default 1e-3), after --warmup N steps (default 5%%)\n"
            "  --min-lr X        end of the cosine decay (default lr/10)\n"
            "  --weight-decay X  AdamW's (default 0.1); --clip X: gradient norm clip (default 1)\n"
            "  --val-every N     validate every N steps (default: 10 times a run); --val-batches N (default 8)\n"
            "  --ckpt-every N    checkpoint every N steps (default: at the end)\n"
            "  --dtype T         f32, bf16 or f16 (activations; the weights stay f32) (default: bf16 on a GPU)\n"
            "  --loss-scale S    dynamic (the default for f16: from 65536, halved when a step's gradients\n"
            "                    overflow and that step skipped, doubled after 2000 good steps), a fixed\n"
            "                    number (overflowing steps still skipped), or off (the default otherwise)\n"
            "  --stop-at N       end this run after step N (resume it later)\n"
            "  --seed N          initialization and data order (default 1)\n"
            "  --zero1           with several ranks: shard AdamW's moments over them (ZeRO stage 1)\n"
            "  --dist-timeout S  with several ranks: seconds a rank waits for the others (default 300)\n"
            "  --bucket-mb N     with several ranks: gradients are summed in buckets of N MB (default 4)\n"
            "  --backend NAME    run on this backend (default: the highest-priority one)\n"
            "  --threads N       threads for the CPU backends\n"
            "  --profile FILE    record a Chrome trace of the run (gradus profile FILE summarizes it)\n"
            "\n"
            "Data parallelism: `mpirun -n N gradus train lm ...`, or N processes with RANK, WORLD_SIZE,\n"
            "LOCAL_RANK, MASTER_ADDR and MASTER_PORT set. Each rank trains --batch x --accum windows of\n"
            "every step (the global batch is N times that); rank 0 writes checkpoints and prints.\n");
}

static int takes_value(const char *a)
{
    static const char *const valued[] = {"--preset", "--config", "--data", "--tokenizer", "--out", "--resume",
                                         "--steps", "--batch", "--seq", "--accum", "--lr", "--min-lr",
                                         "--warmup", "--weight-decay", "--clip", "--val-every", "--val-batches",
                                         "--ckpt-every", "--dtype", "--loss-scale", "--seed", "--backend", "--threads", "--stop-at",
                                         "--profile", "--dist-timeout", "--bucket-mb", NULL};
    return cli_is_one_of(a, valued);
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A run trained on a token file given by path keeps a link to it as OUT/data.tok, so that
 * --resume OUT finds its data. 0, with the reason printed, when the link cannot be made. */
static int remember_tokens(const char *out, const char *tokens, const char *link_path)
{
    char abs[PATH_MAX];
    if (realpath(tokens, abs) == NULL) {
        fprintf(stderr, "gradus train lm: %s: %s\n", tokens, strerror(errno));
        return 0;
    }
    char here[PATH_MAX];
    if (realpath(link_path, here) != NULL && strcmp(here, abs) == 0) return 1; /* it is OUT/data.tok */
    struct stat sb;
    if (lstat(link_path, &sb) == 0 && !S_ISLNK(sb.st_mode)) {
        fprintf(stderr, "gradus train lm: %s already holds other tokens; use another --out for this data\n", out);
        return 0;
    }
    unlink(link_path);
    if (symlink(abs, link_path) != 0) {
        fprintf(stderr, "gradus train lm: cannot link %s to %s: %s\n", link_path, abs, strerror(errno));
        return 0;
    }
    return 1;
}

/* Shannon entropy (bits) of a histogram. */
static double entropy(const int64_t *count, int64_t n, int64_t total)
{
    double h = 0;
    for (int64_t i = 0; i < n; i++)
        if (count[i] > 0) {
            double p = (double)count[i] / (double)total;
            h -= p * log2(p);
        }
    return h;
}

typedef struct corpus_stats {
    double bytes_per_token;
    double byte_entropy;      /* bits per byte, of bytes */
    double token_entropy_bpb; /* bits per byte, of tokens */
} corpus_stats;

static void measure(gd_ctx *ctx, const gd_tokenizer *tok, const cli_corpus *s, corpus_stats *cs)
{
    int64_t bytes[256] = {0};
    for (size_t i = 0; i < s->len; i++) bytes[s->buf[i]]++;
    cs->byte_entropy = entropy(bytes, 256, (int64_t)s->len);
    int32_t *ids = NULL;
    size_t n = 0;
    int32_t V = gd_tokenizer_vocab_size(tok);
    int64_t *count = calloc((size_t)V, sizeof *count);
    if (count != NULL && gd_tokenizer_encode(ctx, tok, s->buf, s->len, &ids, &n) == GD_OK && n > 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < V) count[ids[i]]++;
        cs->bytes_per_token = (double)s->len / (double)n;
        cs->token_entropy_bpb = entropy(count, V, (int64_t)n) / cs->bytes_per_token;
    }
    gd_free_mem(ids);
    free(count);
}

/* Text for measure() when the corpus came as a token file: its first tokens (up to a
 * million) decoded. 0, with the reason printed, on failure. */
static int sample_tokens(gd_ctx *ctx, gd_token_data *td, const gd_tokenizer *tok, cli_corpus *smp)
{
    int64_t T = gd_token_data_tokens(td, GD_SPLIT_TRAIN) - 1;
    if (T > (1 << 20)) T = 1 << 20;
    if (T < 1) return 1; /* training will say the split is too short */
    int32_t *x = malloc((size_t)T * sizeof *x), *y = malloc((size_t)T * sizeof *y);
    uint8_t *text = NULL;
    size_t len = 0;
    gd_data_pos pos = {0};
    gd_status st = x == NULL || y == NULL ? gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory for a sample of the tokens")
                                          : gd_token_data_batch(td, GD_SPLIT_TRAIN, 1, T, &pos, x, y);
    if (st == GD_OK) st = gd_tokenizer_decode(ctx, tok, x, (size_t)T, &text, &len);
    free(x);
    free(y);
    if (st != GD_OK) {
        fprintf(stderr, "gradus train lm: %s\n", gd_ctx_error(ctx));
        return 0;
    }
    if (smp->buf == NULL && (smp->buf = malloc(smp->cap)) == NULL) len = 0;
    smp->len = len < smp->cap ? len : smp->cap;
    if (smp->len > 0) memcpy(smp->buf, text, smp->len);
    gd_free_mem(text);
    return 1;
}

typedef struct progress_out {
    int tty, width;
    double bytes_per_token;
} progress_out;

static void fmt_time(double s, char *buf, size_t cap)
{
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%dh%02dm", t / 3600, t / 60 % 60);
    else snprintf(buf, cap, "%dm%02ds", t / 60, t % 60);
}

static void progress(void *user, const gd_lm_progress *p)
{
    progress_out *o = user;
    char eta[32], line[256];
    fmt_time(p->eta_s, eta, sizeof eta);
    char scale[96] = "";
    if (p->loss_scale > 0)
        snprintf(scale, sizeof scale, " | scale %g%s, %lld skipped", p->loss_scale, p->skipped ? " (this step skipped)" : "",
                 (long long)p->skipped_steps);
    char norm[32];
    if (p->skipped) snprintf(norm, sizeof norm, "-");
    else snprintf(norm, sizeof norm, "%.3f", p->grad_norm);
    int len = snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | grad norm %s%s | %.1fk tok/s | ETA %s",
                       (long long)p->step, (long long)p->steps, p->loss, p->lr, norm, scale, p->tokens_per_s / 1000, eta);
    if (o->tty) printf("\r%s%*s", line, o->width > len ? o->width - len : 0, "");
    else printf("%s\n", line);
    o->width = o->tty ? len : 0;
    if (!isnan(p->val_loss)) {
        if (o->tty) printf("\n");
        if (isnan(o->bytes_per_token)) /* a token file without its tokenizer: bytes unknown */
            printf("step %lld: validation loss %.4f\n", (long long)p->step, p->val_loss);
        else
            printf("step %lld: validation loss %.4f (%.3f bits/byte)\n", (long long)p->step, p->val_loss,
                   p->val_loss / log(2) / o->bytes_per_token);
        o->width = 0;
    }
    fflush(stdout);
}

int cmd_train_lm(int argc, char **argv)
{
    const char *preset = NULL, *config = NULL, *tokfile = NULL, *out = "lm-out", *resume = NULL, *backend = NULL;
    const char *dtype_name = NULL, *profile = NULL, *loss_scale = NULL, *data[32];
    int n_data = 0;
    int64_t steps = 200, batch = 8, seq = 0, accum = 1, warmup = -1, val_every = -1, val_batches = 8, ckpt_every = 0;
    int64_t seed = 1, threads = -1, stop_at = 0;
    double lr = 1e-3, min_lr = 0, wd = 0.1, clip = 1.0, dist_timeout = 0, bucket_mb = 0;
    int zero1 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int ok = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        }
        if (strcmp(a, "--zero1") == 0) {
            zero1 = 1;
            continue;
        }
        if (!takes_value(a)) return cli_unknown("train lm", a);
        if ((v = cli_value(argc, argv, &i)) == NULL) return 2;
        if (strcmp(a, "--preset") == 0) preset = v;
        else if (strcmp(a, "--config") == 0) config = v;
        else if (strcmp(a, "--data") == 0) {
            if (n_data == 32) {
                fprintf(stderr, "gradus train lm: at most 32 --data paths\n");
                return 2;
            }
            data[n_data++] = v;
        } else if (strcmp(a, "--tokenizer") == 0) tokfile = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--resume") == 0) resume = v;
        else if (strcmp(a, "--dtype") == 0) dtype_name = v;
        else if (strcmp(a, "--loss-scale") == 0) loss_scale = v;
        else if (strcmp(a, "--backend") == 0) backend = v;
        else if (strcmp(a, "--profile") == 0) profile = v;
        else if (strcmp(a, "--steps") == 0) ok = cli_int(a, v, 1, INT64_MAX / 2, &steps);
        else if (strcmp(a, "--stop-at") == 0) ok = cli_int(a, v, 1, INT64_MAX / 2, &stop_at);
        else if (strcmp(a, "--batch") == 0) ok = cli_int(a, v, 1, 1 << 20, &batch);
        else if (strcmp(a, "--seq") == 0) ok = cli_int(a, v, 1, 1 << 24, &seq);
        else if (strcmp(a, "--accum") == 0) ok = cli_int(a, v, 1, 1 << 16, &accum);
        else if (strcmp(a, "--warmup") == 0) ok = cli_int(a, v, 0, INT64_MAX / 2, &warmup);
        else if (strcmp(a, "--val-every") == 0) ok = cli_int(a, v, 0, INT64_MAX / 2, &val_every);
        else if (strcmp(a, "--val-batches") == 0) ok = cli_int(a, v, 1, 1 << 20, &val_batches);
        else if (strcmp(a, "--ckpt-every") == 0) ok = cli_int(a, v, 0, INT64_MAX / 2, &ckpt_every);
        else if (strcmp(a, "--seed") == 0) ok = cli_int(a, v, 0, INT64_MAX, &seed);
        else if (strcmp(a, "--threads") == 0) ok = cli_int(a, v, 0, 4096, &threads);
        else if (strcmp(a, "--lr") == 0) ok = cli_double(a, v, 1e-12, 10, &lr);
        else if (strcmp(a, "--min-lr") == 0) ok = cli_double(a, v, 0, 10, &min_lr);
        else if (strcmp(a, "--weight-decay") == 0) ok = cli_double(a, v, 0, 10, &wd);
        else if (strcmp(a, "--clip") == 0) ok = cli_double(a, v, 0, 1e9, &clip);
        else if (strcmp(a, "--dist-timeout") == 0) ok = cli_double(a, v, 0.001, 1e7, &dist_timeout);
        else if (strcmp(a, "--bucket-mb") == 0) ok = cli_double(a, v, 0.001, 1 << 20, &bucket_mb);
        if (!ok) return 2;
    }
    if (preset != NULL && config != NULL) {
        fprintf(stderr, "gradus train lm: give --preset or --config, not both\n");
        return 2;
    }
    if (dtype_name != NULL && strcmp(dtype_name, "f32") != 0 && strcmp(dtype_name, "bf16") != 0 &&
        strcmp(dtype_name, "f16") != 0) {
        fprintf(stderr, "gradus train lm: --dtype %s: want f32, bf16 or f16\n", dtype_name);
        return 2;
    }
    gd_loss_scale_config lsc = {.mode = GD_LOSS_SCALE_AUTO};
    if (loss_scale != NULL) {
        if (strcmp(loss_scale, "dynamic") == 0) {
            lsc.mode = GD_LOSS_SCALE_DYNAMIC;
        } else if (strcmp(loss_scale, "off") == 0) {
            lsc.mode = GD_LOSS_SCALE_OFF;
        } else {
            char *end = NULL;
            errno = 0;
            double v = strtod(loss_scale, &end);
            /* what an f32 scale holds: a normal positive number */
            if (end == loss_scale || *end != '\0' || errno != 0 || !(v >= 1.1754944e-38 && v <= 3.4028234e38)) {
                fprintf(stderr, "gradus train lm: --loss-scale %s: want dynamic, off, or a positive number "
                                "(at most 3.4e38)\n", loss_scale);
                return 2;
            }
            lsc.mode = GD_LOSS_SCALE_FIXED;
            lsc.init = v;
        }
    }
    char parent[4096];
    if (resume != NULL) {
        /* a run's directory, or one of its checkpoints: new checkpoints go beside it */
        snprintf(parent, sizeof parent, "%s/config.json", resume);
        if (exists(parent)) {
            snprintf(parent, sizeof parent, "%s", resume);
            char *slash = strrchr(parent, '/');
            while (slash != NULL && slash > parent && slash[1] == '\0') { /* "run/ckpt/" */
                *slash = '\0';
                slash = strrchr(parent, '/');
            }
            if (slash == NULL) snprintf(parent, sizeof parent, ".");
            else if (slash == parent) parent[1] = '\0';
            else *slash = '\0';
            out = parent;
        } else {
            out = resume;
        }
    }
    /* one rank per GPU: the launcher's local rank picks it, unless the launcher did */
    const char *lr_env = getenv("OMPI_COMM_WORLD_LOCAL_RANK") ? getenv("OMPI_COMM_WORLD_LOCAL_RANK") : getenv("LOCAL_RANK");
    if (gd_dist_launched() && lr_env != NULL && getenv("CUDA_VISIBLE_DEVICES") == NULL)
        setenv("CUDA_VISIBLE_DEVICES", lr_env, 1);
    gd_ctx *ctx = cli_ctx(backend);
    if (ctx == NULL) return 1;
    gd_dist *dist = NULL;
    if (gd_dist_launched()) {
        gd_dist_options dopt = {.size = sizeof dopt, .timeout_s = dist_timeout,
                                .bucket_bytes = (size_t)(bucket_mb * 1024 * 1024)};
        if (gd_dist_open(ctx, &dopt, &dist) != GD_OK) {
            fprintf(stderr, "gradus train lm: %s\n", gd_ctx_error(ctx));
            gd_ctx_free(ctx);
            return 1;
        }
        /* the other ranks' output would repeat rank 0's; their errors still reach stderr */
        if (gd_dist_rank(dist) != 0 && freopen("/dev/null", "w", stdout) == NULL) {
            fprintf(stderr, "gradus train lm: rank %d: cannot silence its output\n", gd_dist_rank(dist));
        }
    }
    int rank = gd_dist_rank(dist);
    /* each rank its own trace: FILE for rank 0, FILE.rank<r> for the others */
    char rank_profile[4200];
    if (profile != NULL && rank != 0) {
        snprintf(rank_profile, sizeof rank_profile, "%s.rank%d", profile, rank);
        profile = rank_profile;
    }
    /* ranks sharing a machine share its cores, unless told otherwise */
    const char *local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE") ? getenv("OMPI_COMM_WORLD_LOCAL_SIZE")
                                                                  : getenv("LOCAL_WORLD_SIZE");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 0 && dist != NULL && local_size != NULL && atoi(local_size) > 1 && cores > 0)
        threads = cores / atoi(local_size) > 0 ? cores / atoi(local_size) : 1;
    if (threads >= 0) gd_ctx_set_threads(ctx, (int)threads);
    /* a trace that cannot be written costs the trace, never the training */
    cli_profile_start(ctx, "train lm", profile);
    int rc = 1;
    gd_tokenizer *tok = NULL;
    gd_token_data *td = NULL;
    cli_corpus smp = {.cap = SAMPLE_BYTES};
    char tok_path[4200], data_path[4200], cfg_path[4200];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", out);
    snprintf(data_path, sizeof data_path, "%s/data.tok", out);

    /* the model */
    gd_lm_config m;
    gd_status st;
    char ck[4200] = "";
    if (resume != NULL) { /* the run's own config */
        st = gd_lm_checkpoint_resolve(ctx, resume, ck, sizeof ck);
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", ck);
        if (st == GD_OK) st = gd_lm_config_read(ctx, cfg_path, &m);
    } else if (config != NULL) {
        st = gd_lm_config_read(ctx, config, &m);
    } else {
        st = gd_lm_preset(ctx, preset != NULL ? preset : "tiny", &m);
    }
    if (st == GD_OK) st = gd_lm_config_check(ctx, &m);
    if (st != GD_OK) goto fail;
    if (seq == 0) seq = m.max_seq < 256 ? m.max_seq : 256;
    if (seq > m.max_seq) { /* before any data is encoded */
        fprintf(stderr, "gradus train lm: --seq %lld is longer than the model's %lld positions\n", (long long)seq,
                (long long)m.max_seq);
        goto done;
    }
    if (!cli_mkdirs("train lm", out)) goto done;

    /* with ranks: rank 0 prepares OUT's data and tokenizer, then the others use them as a
     * resumed run does */
    if (rank != 0) {
        if (gd_dist_barrier(dist, "waiting for rank 0 to prepare the data") != GD_OK) goto fail;
        n_data = 0;
        tokfile = NULL;
    }
    /* the data: a token file, or text encoded into OUT/data.tok once */
    const char *tokens = NULL;
    if (n_data == 1 && ends_with(data[0], ".tok")) tokens = data[0];
    else if (n_data == 0 && exists(data_path)) tokens = data_path;
    if (n_data == 0 && tokens == NULL) {
        fprintf(stderr, "gradus train lm: no --data given and %s has none from an earlier run\n", out);
        goto done;
    }
    if (tokens != NULL && tokens != data_path && resume == NULL && !remember_tokens(out, tokens, data_path)) goto done;
    /* the tokenizer: given; else the checkpoint's when resuming; else the run's own */
    char ck_tok[4300];
    snprintf(ck_tok, sizeof ck_tok, "%s/tokenizer.json", ck);
    const char *use_tok = tokfile != NULL                  ? tokfile
                          : resume != NULL && exists(ck_tok) ? ck_tok
                          : exists(tok_path) && (tokens != NULL || resume != NULL) ? tok_path
                                                                                   : NULL;
    if (use_tok != NULL) {
        if ((st = gd_tokenizer_load(ctx, use_tok, &tok)) != GD_OK) goto fail;
        /* fewer tokens than the model has rows is fine (rows unused, as GPT-2 pads); more
         * would give ids the model cannot embed */
        if (gd_tokenizer_vocab_size(tok) > m.vocab_size) {
            fprintf(stderr, "gradus train lm: %s has %d tokens, more than the model's vocabulary of %lld\n", use_tok,
                    (int)gd_tokenizer_vocab_size(tok), (long long)m.vocab_size);
            goto done;
        }
        /* the run's directory keeps the tokenizer it was trained with, for generate and resume */
        if (use_tok == tokfile && resume == NULL && (st = gd_tokenizer_save(ctx, tok, tok_path)) != GD_OK) goto fail;
    }
    for (int i = 0; i < n_data && tokens == NULL; i++)
        if (!cli_corpus_read("train lm", &smp, data[i])) goto done;
    if (tokens == NULL && smp.len == 0) {
        fprintf(stderr, "gradus train lm: the corpus (%s%s) is empty\n", data[0], n_data > 1 ? ", ..." : "");
        goto done;
    }
    if (tok == NULL && tokens != NULL) {
        printf("no tokenizer for %s: training on its ids; give --tokenizer to keep one with the checkpoints\n", tokens);
    } else if (tok == NULL) {
        printf("training a byte-level BPE tokenizer of %lld tokens on %.1f MB of text (%lld files)\n",
               (long long)m.vocab_size, (double)smp.len / 1e6, (long long)smp.files);
        fflush(stdout);
        if ((st = gd_tokenizer_train(ctx, smp.buf, smp.len, (int32_t)m.vocab_size, &tok)) != GD_OK ||
            (st = gd_tokenizer_save(ctx, tok, tok_path)) != GD_OK)
            goto fail;
    }
    if (tokens == NULL) {
        gd_token_file_info info;
        if ((st = gd_tokens_build(ctx, tok, data, n_data, data_path, NULL, NULL, &info)) != GD_OK) goto fail;
        printf("encoded %lld documents, %.1f MB, into %lld tokens: %s\n", (long long)info.documents,
               (double)info.bytes / 1e6, (long long)info.tokens, data_path);
        tokens = data_path;
    }
    if (rank == 0 && dist != NULL && gd_dist_barrier(dist, "the data prepared by rank 0") != GD_OK) goto fail;
    if ((st = gd_token_data_open(ctx, tokens, 0.05, &td)) != GD_OK) goto fail;
    corpus_stats cs = {.bytes_per_token = NAN, .byte_entropy = NAN, .token_entropy_bpb = NAN};
    if (smp.len == 0 && tok != NULL && !sample_tokens(ctx, td, tok, &smp)) goto done;
    if (smp.len > 0) measure(ctx, tok, &smp, &cs);
    free(smp.buf);
    smp.buf = NULL;

    /* train */
    int gpu = strcmp(gd_ctx_backend(ctx), "cuda") == 0;
    gd_dtype dt = GD_F32;
    if (dtype_name == NULL) dt = gpu ? GD_BF16 : GD_F32;
    else if (!gd_dtype_parse(dtype_name, &dt)) dt = GD_F32; /* checked above */
    progress_out po = {.tty = isatty(fileno(stdout)), .bytes_per_token = cs.bytes_per_token};
    gd_lm_train_config c = {
        .model = m, .data = td, .tokenizer = tok, .steps = steps, .stop_at = stop_at, .batch = batch, .seq = seq,
        .grad_accum = accum, .lr = lr, .min_lr = min_lr, .warmup = warmup >= 0 ? warmup : steps / 20,
        .weight_decay = wd, .clip = clip, .val_every = val_every >= 0 ? val_every : (steps >= 10 ? steps / 10 : 0),
        .val_batches = val_batches, .ckpt_every = ckpt_every, .out_dir = out, .resume_dir = resume, .dtype = dt,
        .seed = (uint64_t)seed, .report_every_s = po.tty ? 0.25 : 1.0, .progress = progress, .user = &po,
        .dist = dist, .zero1 = zero1, .loss_scale = lsc};
    printf("model %s: %s, dim %lld, %lld layers, %lld heads (%lld kv), vocab %lld\n",
           config != NULL ? config : resume != NULL ? "resumed" : preset != NULL ? preset : "tiny",
           m.arch == GD_LM_GPT2 ? "GPT-2" : "llama", (long long)m.dim, (long long)m.n_layers, (long long)m.n_heads,
           (long long)m.n_kv_heads, (long long)m.vocab_size);
    char scaling[96] = "";
    int scaled = lsc.mode == GD_LOSS_SCALE_AUTO ? dt == GD_F16 : lsc.mode != GD_LOSS_SCALE_OFF;
    if (scaled && lsc.mode == GD_LOSS_SCALE_FIXED) snprintf(scaling, sizeof scaling, ", loss scale %g", lsc.init);
    else if (scaled) snprintf(scaling, sizeof scaling, ", dynamic loss scale");
    printf("backend %s, %s%s, batch %lld x %lld tokens%s, %lld steps, AdamW lr %g, %s\n", gd_ctx_backend(ctx),
           gd_dtype_name(dt), scaling, (long long)batch, (long long)seq, accum > 1 ? " (accumulated)" : "",
           (long long)steps, lr, resume != NULL ? "resumed" : "from scratch");
    if (dist != NULL)
        printf("data parallel: %d ranks over %s, global batch %lld x %lld tokens, gradients in buckets of %.1f MB%s\n",
               gd_dist_size(dist), gd_dist_transport(dist), (long long)(batch * accum * gd_dist_size(dist)),
               (long long)seq, (double)gd_dist_bucket_bytes(dist) / (1024.0 * 1024.0),
               zero1 ? ", optimizer sharded (ZeRO-1)" : "");
    fflush(stdout);
    gd_lm_train_result r;
    st = gd_lm_train(ctx, &c, &r);
    if (po.width > 0) printf("\n");
    if (st != GD_OK) goto fail;
    if (r.saw_nan && r.loss_scale > 0 && isfinite(r.train_loss)) { /* with scaling, only the scale's floor stops */
        fprintf(stderr, "gradus train lm: the gradients were inf or NaN at every step up to step %lld, whatever the "
                        "loss scale (%lld steps skipped, scale down to %g)\n", (long long)r.steps,
                (long long)r.skipped_steps, r.loss_scale);
        goto done;
    }
    if (r.saw_nan) {
        fprintf(stderr, "gradus train lm: the loss became NaN or infinite at step %lld\n", (long long)r.steps);
        goto done;
    }
    printf("trained %lld steps at %.1fk tokens/s; activation memory %.1f MB on %s\n", (long long)r.steps,
           r.tokens_per_s / 1000, (double)r.activation_bytes / 1e6, gd_ctx_backend(ctx));
    if (r.loss_scale > 0)
        printf("loss scale %g at the end; %lld steps skipped for inf or NaN gradients\n", r.loss_scale,
               (long long)r.skipped_steps);
    if (dist != NULL)
        printf("memory of rank 0 of %d: parameters %.2f MB, gradient buffers %.2f MB, optimizer moments %.2f MB; "
               "gradients summed on %s\n",
               r.ranks, (double)r.param_bytes / 1e6, (double)r.grad_bytes / 1e6, (double)r.optimizer_bytes / 1e6,
               r.summed_on);
    if (!isnan(r.val_loss) && !isnan(cs.bytes_per_token))
        printf("validation loss %.4f nats/token = %.3f bits/byte\n", r.val_loss, r.val_loss / log(2) / cs.bytes_per_token);
    else if (!isnan(r.val_loss)) /* a token file without its tokenizer: bytes unknown */
        printf("validation loss %.4f nats/token\n", r.val_loss);
    if (!isnan(cs.token_entropy_bpb))
        printf("unigram entropy of the corpus: %.3f bits/byte (of its tokens), %.3f bits/byte (of its bytes)\n",
               cs.token_entropy_bpb, cs.byte_entropy);
    if (r.checkpoint[0]) printf("checkpoint: %s\n", r.checkpoint);
    if (r.metrics[0]) printf("metrics: %s\n", r.metrics);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "gradus train lm: %s\n", gd_ctx_error(ctx));
done:
    /* a rank that stops early leaves without waiting for the others to agree */
    if (rc != 0) gd_dist_set_broken(dist);
    if (!cli_profile_finish(ctx, "train lm") && rc == 0) rc = 1;
    free(smp.buf);
    gd_token_data_close(td);
    gd_tokenizer_free(tok);
    gd_dist_close(dist);
    gd_ctx_free(ctx);
    return rc;
}
