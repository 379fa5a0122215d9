/* encode_ids — prints the ids gradus encodes a file to, for comparing with another
 * implementation (bench/tokenizer_parity.py): one line of space-separated ids.
 *
 *   encode_ids TOKENIZER.json TEXT_FILE          ids of the whole file
 *   encode_ids TOKENIZER.json TEXT_FILE --lines  ids of each line (without its newline)
 */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 1 << 20, len = 0;
    unsigned char *b = malloc(cap);
    while (b != NULL) {
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *bigger = realloc(b, cap * 2);
        if (bigger == NULL) free(b);
        b = bigger;
        cap *= 2;
    }
    fclose(f);
    *n = len;
    return b;
}

static int print_ids(gd_ctx *ctx, const gd_tokenizer *t, const unsigned char *s, size_t n)
{
    int32_t *ids;
    size_t k;
    if (gd_tokenizer_encode(ctx, t, s, n, &ids, &k) != GD_OK) return -1;
    for (size_t i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    gd_free_mem(ids);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json TEXT_FILE [--lines]\n", argv[0]);
        return 2;
    }
    int lines = argc > 3 && strcmp(argv[3], "--lines") == 0;
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) return 1;
    gd_tokenizer *t;
    if (gd_tokenizer_load(ctx, argv[1], &t) != GD_OK) {
        fprintf(stderr, "%s\n", gd_ctx_error(ctx));
        return 1;
    }
    size_t n;
    unsigned char *text = slurp(argv[2], &n);
    if (text == NULL) {
        fprintf(stderr, "%s: cannot read\n", argv[2]);
        return 1;
    }
    int rc = 0;
    if (!lines) {
        rc = print_ids(ctx, t, text, n);
    } else {
        for (size_t p = 0; p < n && rc == 0;) {
            unsigned char *nl = memchr(text + p, '\n', n - p);
            size_t e = nl != NULL ? (size_t)(nl - text) : n;
            rc = print_ids(ctx, t, text + p, e - p);
            p = e + 1;
        }
    }
    if (rc != 0) fprintf(stderr, "%s\n", gd_ctx_error(ctx));
    free(text);
    gd_tokenizer_free(t);
    gd_ctx_free(ctx);
    return rc != 0;
}
