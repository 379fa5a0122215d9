/* cmd_tokenize.c — `gradus tokenize`: a corpus into a token file, with a tokenizer given
 * or trained on it, ready for `gradus train lm --data OUT/data.tok --tokenizer
 * OUT/tokenizer.json` (the same steps train lm takes for text, done once ahead). */
#include "cli.h"
#include "gradus_lm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void help(FILE *f)
{
    fprintf(f, "usage: gradus tokenize --data PATH [--data PATH ...] --out DIR [--vocab N | --tokenizer FILE]\n"
               "\n"
               "Encodes text files (or directories of them; each file a document) into DIR/data.tok,\n"
               "with FILE's tokenizer, or a byte-level BPE of N tokens (default 32000) trained on the\n"
               "text and saved as DIR/tokenizer.json.\n");
}

int cmd_tokenize(int argc, char **argv)
{
    const char *data[32], *out = NULL, *tokfile = NULL;
    int n_data = 0;
    int64_t vocab = 32000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return 0;
        }
        if (!cli_is_one_of(a, (const char *const[]){"--data", "--out", "--vocab", "--tokenizer", NULL}))
            return cli_unknown("tokenize", a);
        if ((v = cli_value(argc, argv, &i)) == NULL) return 2;
        if (strcmp(a, "--data") == 0) {
            if (n_data == 32) {
                fprintf(stderr, "gradus tokenize: at most 32 --data paths\n");
                return 2;
            }
            data[n_data++] = v;
        } else if (strcmp(a, "--out") == 0) {
            out = v;
        } else if (strcmp(a, "--tokenizer") == 0) {
            tokfile = v;
        } else if (!cli_int(a, v, 257, 1 << 24, &vocab)) {
            return 2;
        }
    }
    if (n_data == 0 || out == NULL) {
        help(stderr);
        return 2;
    }
    if (!cli_mkdirs("tokenize", out)) return 1;
    gd_ctx *ctx = cli_ctx(NULL);
    if (ctx == NULL) return 1;
    gd_tokenizer *tok = NULL;
    int rc = 1;
    char path[4200];
    gd_status st;
    if (tokfile != NULL) {
        st = gd_tokenizer_load(ctx, tokfile, &tok);
    } else {
        cli_corpus c = {.cap = (size_t)64 << 20};
        for (int i = 0; i < n_data; i++)
            if (!cli_corpus_read("tokenize", &c, data[i])) {
                free(c.buf);
                goto done;
            }
        printf("training a byte-level BPE of %lld tokens on %.1f MB (%lld files)\n", (long long)vocab,
               (double)c.len / 1e6, (long long)c.files);
        fflush(stdout);
        st = c.len == 0 ? gd_ctx_fail(ctx, GD_ERR_INVALID, "the corpus (%s%s) is empty", data[0], n_data > 1 ? ", ..." : "")
                        : gd_tokenizer_train(ctx, c.buf, c.len, (int32_t)vocab, &tok);
        free(c.buf);
        snprintf(path, sizeof path, "%s/tokenizer.json", out);
        if (st == GD_OK) st = gd_tokenizer_save(ctx, tok, path);
        if (st == GD_OK) printf("tokenizer: %s (%d tokens)\n", path, (int)gd_tokenizer_vocab_size(tok));
    }
    if (st != GD_OK) goto fail;
    gd_token_file_info info;
    snprintf(path, sizeof path, "%s/data.tok", out);
    if ((st = gd_tokens_build(ctx, tok, data, n_data, path, NULL, NULL, &info)) != GD_OK) goto fail;
    printf("tokens: %s (%lld documents, %.1f MB, %lld tokens, %.2f bytes per token)\n", path,
           (long long)info.documents, (double)info.bytes / 1e6, (long long)info.tokens,
           info.tokens > 0 ? (double)info.bytes / (double)info.tokens : 0.0);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "gradus tokenize: %s\n", gd_ctx_error(ctx));
done:
    gd_tokenizer_free(tok);
    gd_ctx_free(ctx);
    return rc;
}
