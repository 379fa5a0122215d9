/* cmd_eval.c — `gradus eval`: a language model's loss and perplexity on held-out text,
 * encoded with the model's tokenizer (or --tokenizer), in windows of --seq tokens. */
#include "cli.h"
#include "gradus_lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f, "usage: gradus eval --model PATH --data FILE [options]\n"
               "\n"
               "The model's mean loss on the text of FILE (or of the files under a directory, in sorted\n"
               "order; up to 256 MB) in nats per token, its perplexity and bits per\n"
               "byte. The text is encoded with the model's tokenizer and cut into windows of T + 1\n"
               "tokens, each predicting its last T.\n"
               "\n"
               "  --model PATH       a checkpoint, a training directory, a Hugging Face model directory, or\n"
               "                     a llama2.c checkpoint file (then give --tokenizer)\n"
               "  --tokenizer FILE   a tokenizer.json or llama2.c tokenizer.bin (default: the model's)\n"
               "  --seq T            positions per window (default: the model's, at most 256)\n"
               "  --batch B          windows per run (default 8)\n"
               "  --dtype T          f32 (default), bf16 or f16 activations\n"
               "  --quantize Q       int8: projection and head weights in int8 (one scale per output\n"
               "                     channel); w8a8: each token's activations in int8 too\n"
               "  --max-tokens N     stop after about N predicted tokens\n"
               "  --backend NAME     run on this backend\n");
}

/* Text read for evaluation at most (a larger --data is evaluated on its first part). */
#define EVAL_MAX_BYTES ((size_t)256 << 20)

int cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *data = NULL, *tokenizer = NULL, *backend = NULL, *dtype = "f32";
    gd_dtype dt = GD_F32;
    int64_t seq = 0, batch = 0, max_tokens = 0;
    gd_lm_quant quant = GD_LM_FLOAT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int ok = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        }
        static const char *const valued[] = {"--model", "--data", "--tokenizer", "--seq", "--batch", "--dtype",
                                             "--max-tokens", "--backend", "--quantize", NULL};
        if (!cli_is_one_of(a, valued)) return cli_unknown("eval", a);
        if ((v = cli_value(argc, argv, &i)) == NULL) return 2;
        if (strcmp(a, "--model") == 0) model = v;
        else if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--tokenizer") == 0) tokenizer = v;
        else if (strcmp(a, "--backend") == 0) backend = v;
        else if (strcmp(a, "--dtype") == 0) ok = cli_float_dtype(a, dtype = v, &dt);
        else if (strcmp(a, "--seq") == 0) ok = cli_int(a, v, 1, 1 << 20, &seq);
        else if (strcmp(a, "--batch") == 0) ok = cli_int(a, v, 1, 1 << 16, &batch);
        else if (strcmp(a, "--max-tokens") == 0) ok = cli_int(a, v, 1, INT64_MAX, &max_tokens);
        else if (strcmp(a, "--quantize") == 0) ok = cli_quantize(a, v, &quant);
        if (!ok) return 2;
    }
    if (model == NULL || data == NULL) {
        fprintf(stderr, "gradus eval: %s\n\n",
                model == NULL ? "which model? (--model PATH)" : "which text? (--data FILE)");
        help(stderr);
        return 2;
    }
    gd_ctx *ctx = cli_ctx(backend);
    if (ctx == NULL) return 1;
    int rc = 1;
    gd_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    cli_corpus text = {.cap = EVAL_MAX_BYTES};
    char dir[4200];
    gd_status st = GD_OK;
    if (!cli_model_tokenizer(ctx, "eval", model, tokenizer, dir, sizeof dir, &tok)) goto done;
    if (tok == NULL) {
        fprintf(stderr, "gradus eval: %s has no tokenizer.json: give --tokenizer\n", dir);
        goto done;
    }
    if (!cli_corpus_read("eval", &text, data)) goto done;
    if ((st = gd_tokenizer_encode(ctx, tok, text.buf, text.len, &ids, &n)) != GD_OK) goto fail;
    gd_lm_eval_config ec = {.seq = seq, .batch = batch, .dtype = dt, .max_tokens = max_tokens, .quantize = quant};
    gd_lm_eval_result r;
    if ((st = gd_lm_evaluate(ctx, model, ids, (int64_t)n, &ec, &r)) != GD_OK) goto fail;
    double bytes_per_token = n > 0 ? (double)text.len / (double)n : 1.0;
    printf("%s: %lld of its %zu tokens predicted (%s%s): loss %.4f nats/token, perplexity %.3f, %.3f bits/byte\n", data,
           (long long)r.tokens, n, dtype, quant == GD_LM_INT8 ? ", int8 weights" : quant == GD_LM_W8A8 ? ", w8a8" : "", r.nll, r.perplexity, r.nll / log(2.0) / bytes_per_token);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "gradus eval: %s\n", gd_ctx_error(ctx));
done:
    free(text.buf);
    gd_free_mem(ids);
    gd_tokenizer_free(tok);
    gd_ctx_free(ctx);
    return rc;
}
