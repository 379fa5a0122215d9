/* cmd_generate.c — `gradus generate`: continues a prompt with a trained model, streaming
 * the tokens as they come, and ends with the rate. The model is a gradus checkpoint (or
 * training directory, whose latest checkpoint it takes); its tokenizer.json decodes the
 * tokens, and --prompt-ids / --print-ids serve models without one and tools comparing
 * token by token. */
#include "cli.h"
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f, "usage: gradus generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
               "\n"
               "  --model PATH       a checkpoint, a training directory (its latest checkpoint), a Hugging\n"
               "                     Face model directory, or a llama2.c checkpoint file (with --prompt-ids)\n"
               "  --prompt TEXT      text to continue (encoded with the model's tokenizer.json)\n"
               "  --prompt-ids LIST  token ids to continue, comma separated\n"
               "  --tokenizer FILE   a tokenizer.json or llama2.c tokenizer.bin (default: the model's)\n"
               "  --max-tokens N     tokens to add (default 64)\n"
               "  --temperature X    0 for greedy (default 0.8)\n"
               "  --top-k K          sample among the K most likely (default 0: all)\n"
               "  --top-p P          sample among the most likely holding mass P (default 0.95)\n"
               "  --seed S           the sampler's seed (default 1)\n"
               "  --print-ids        print token ids instead of text\n"
               "  --recompute        no KV cache: recompute the whole window for each token\n"
               "  --dtype T          compute in f32, bf16 or f16 (default: as the weights are stored)\n"
               "  --quantize Q       int8: projection and head weights in int8 (one scale per output\n"
               "                     channel); w8a8: each token's activations in int8 too\n"
               "  --batch B          B continuations decoded together, printed one per line at the end\n"
               "  --backend NAME     run on this backend\n"
               "  --profile FILE     record a Chrome trace of the generation\n");
}

typedef struct stream {
    const gd_tokenizer *tok;
    int ids;
    int64_t n;
} stream;

static void on_token(void *user, int32_t id)
{
    stream *s = user;
    size_t len = 0;
    const uint8_t *b = s->tok != NULL && !s->ids ? gd_tokenizer_token(s->tok, id, &len) : NULL;
    if (b != NULL) fwrite(b, 1, len, stdout);
    else printf("%s%d", s->n ? "," : "", (int)id);
    s->n++;
    fflush(stdout);
}

static int parse_ids(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 16;
    int32_t *v = malloc(cap * sizeof *v);
    *n = 0;
    while (v != NULL && *s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > INT32_MAX || (*end != ',' && *end != '\0')) break;
        if (*n == cap) {
            int32_t *w = realloc(v, (cap *= 2) * sizeof *v);
            if (w == NULL) break;
            v = w;
        }
        v[(*n)++] = (int32_t)x;
        s = *end == ',' ? end + 1 : end;
    }
    if (v == NULL || *s != '\0' || *n == 0) {
        free(v);
        *out = NULL;
        return 0;
    }
    *out = v;
    return 1;
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *prompt_ids = NULL, *backend = NULL, *profile = NULL, *tokenizer = NULL;
    int dtype_given = 0;
    gd_dtype dt = GD_F32;
    gd_lm_quant quant = GD_LM_FLOAT;
    int64_t max_tokens = 64, top_k = 0, seed = 1, batch = 1;
    double temperature = 0.8, top_p = 0.95;
    int print_ids = 0, recompute = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int ok = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        }
        if (strcmp(a, "--print-ids") == 0 || strcmp(a, "--recompute") == 0) {
            if (strcmp(a, "--print-ids") == 0) print_ids = 1;
            else recompute = 1;
            continue;
        }
        static const char *const valued[] = {"--model",   "--prompt",  "--prompt-ids", "--max-tokens", "--temperature",
                                             "--top-k",   "--top-p",   "--seed",       "--backend",    "--profile",
                                             "--tokenizer", "--dtype", "--quantize",   "--batch",      NULL};
        if (!cli_is_one_of(a, valued)) return cli_unknown("generate", a);
        if ((v = cli_value(argc, argv, &i)) == NULL) return 2;
        if (strcmp(a, "--model") == 0) model = v;
        else if (strcmp(a, "--prompt") == 0) prompt = v;
        else if (strcmp(a, "--prompt-ids") == 0) prompt_ids = v;
        else if (strcmp(a, "--backend") == 0) backend = v;
        else if (strcmp(a, "--profile") == 0) profile = v;
        else if (strcmp(a, "--tokenizer") == 0) tokenizer = v;
        else if (strcmp(a, "--dtype") == 0) ok = dtype_given = cli_float_dtype(a, v, &dt);
        else if (strcmp(a, "--quantize") == 0) ok = cli_quantize(a, v, &quant);
        else if (strcmp(a, "--batch") == 0) ok = cli_int(a, v, 1, 65536, &batch);
        else if (strcmp(a, "--max-tokens") == 0) ok = cli_int(a, v, 1, 1 << 20, &max_tokens);
        else if (strcmp(a, "--top-k") == 0) ok = cli_int(a, v, 0, INT32_MAX, &top_k);
        else if (strcmp(a, "--seed") == 0) ok = cli_int(a, v, 0, INT64_MAX, &seed);
        else if (strcmp(a, "--temperature") == 0) ok = cli_double(a, v, 0, 100, &temperature);
        else if (strcmp(a, "--top-p") == 0) ok = cli_double(a, v, 0, 1, &top_p);
        if (!ok) return 2;
    }
    if (batch > 1 && recompute) {
        fprintf(stderr, "gradus generate: --batch decodes through the KV cache; it does not go with --recompute\n");
        return 2;
    }
    if (model == NULL || (prompt == NULL) == (prompt_ids == NULL)) {
        fprintf(stderr, "gradus generate: %s\n\n",
                model == NULL ? "which model? (--model DIR)" : "give --prompt or --prompt-ids (one of them)");
        help(stderr);
        return 2;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (prompt_ids != NULL && !parse_ids(prompt_ids, &ids, &n)) {
        fprintf(stderr, "gradus generate: --prompt-ids \"%s\": want ids like 1,2,3\n", prompt_ids);
        return 2;
    }
    gd_ctx *ctx = cli_ctx(backend);
    if (ctx == NULL) {
        free(ids);
        return 1;
    }
    cli_profile_start(ctx, "generate", profile);
    int rc = 1;
    gd_tokenizer *tok = NULL;
    int32_t *out = NULL;
    int64_t n_out = 0;
    char dir[4200];
    gd_status st = GD_OK;
    if (!cli_model_tokenizer(ctx, "generate", model, tokenizer, dir, sizeof dir, &tok)) goto done;
    if (prompt_ids != NULL) {
        /* parsed before the context was made */
    } else if (tok == NULL) {
        fprintf(stderr, "gradus generate: %s has no tokenizer.json; give the prompt as --prompt-ids, or a --tokenizer\n", dir);
        goto done;
    } else if ((st = gd_tokenizer_encode(ctx, tok, (const uint8_t *)prompt, strlen(prompt), &ids, &n)) != GD_OK) {
        goto fail;
    }
    if (batch > 1) {
        gd_lm_generate_config bc = {.max_tokens = max_tokens, .use_dtype = dtype_given, .dtype = dt,
                                    .quantize = quant,
                                    .sample = {.temperature = temperature, .top_k = top_k, .top_p = top_p,
                                               .seed = (uint64_t)seed}};
        int32_t stop = tok != NULL ? gd_tokenizer_eos(tok) : -1;
        if (stop >= 0) bc.stop_ids = &stop, bc.n_stop = 1;
        rc = cli_generate_batch(ctx, dir, tok, prompt, ids, (int64_t)n, batch, &bc, print_ids) ? 0 : 1;
        goto done;
    }
    stream s = {.tok = tok, .ids = print_ids || tok == NULL};
    if (!s.ids) fwrite(prompt != NULL ? prompt : "", 1, prompt != NULL ? strlen(prompt) : 0, stdout);
    fflush(stdout);
    gd_lm_generate_config gc = {.max_tokens = max_tokens, .use_dtype = dtype_given, .dtype = dt,
                                .quantize = quant,
                                .sample = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = (uint64_t)seed},
                                .on_token = on_token, .user = &s, .recompute = recompute};
    int32_t eos = tok != NULL ? gd_tokenizer_eos(tok) : -1;
    if (eos >= 0) gc.stop_ids = &eos, gc.n_stop = 1;
    st = gd_lm_generate(ctx, dir, ids, (int64_t)n, &gc, &out, &n_out);
    printf("\n");
    if (st != GD_OK) goto fail;
    int64_t made = n_out - (int64_t)n;
    fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %lld tokens in %.3f s (%.1f tokens/s)%s\n",
            (long long)n, gc.prefill_s, gc.prefill_s > 0 ? (double)n / gc.prefill_s : 0.0, (long long)made,
            gc.decode_s, gc.decode_s > 0 && made > 1 ? (double)(made - 1) / gc.decode_s : 0.0,
            recompute ? " (no KV cache: the window recomputed per token)" : "");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "gradus generate: %s\n", gd_ctx_error(ctx));
done:
    if (!cli_profile_finish(ctx, "generate") && rc == 0) rc = 1;
    gd_free_mem(out);
    free(ids);
    gd_tokenizer_free(tok);
    gd_ctx_free(ctx);
    return rc;
}
