/* test_tokenizer_l2c.c — llama2.c's tokenizer.bin: a hand-built file (the 3 control and 256
 * byte tokens, then pieces with scores) encodes text as llama2.c's run.c does (worked by
 * hand below), decodes back to the text with the dummy space, falls back to byte tokens
 * for a character with no piece, and malformed files are refused naming the file.
 */
#include "gradus_lm.h"
#include "testutil.h"

#include <stdlib.h>
#include <unistd.h>

static void put(FILE *f, float score, const char *piece, int n)
{
    int32_t len = n >= 0 ? n : (int32_t)strlen(piece);
    fwrite(&score, 4, 1, f);
    fwrite(&len, 4, 1, f);
    fwrite(piece, 1, (size_t)len, f);
}

/* ids 259.. : " " "a" "b" "c" "ab" "abc" " a" "é" " ab" */
static int write_file(const char *path, int bad_byte_token, int cut)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) return 0;
    int32_t longest = 8;
    fwrite(&longest, 4, 1, f);
    put(f, 0, "<unk>", -1);
    put(f, 0, "\n<s>\n", -1);
    put(f, 0, "\n</s>\n", -1);
    for (int b = 0; b < 256; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b == 7 && bad_byte_token ? 8 : b);
        put(f, 0, p, -1);
    }
    static const struct {
        const char *p;
        float s;
    } pieces[] = {{" ", -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"ab", -0.5f}, {"abc", -0.2f}, {" a", -0.8f},
                  {"\xc3\xa9", -3}, {" ab", -0.3f}};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) put(f, pieces[i].s, pieces[i].p, -1);
    if (cut) fwrite("\0\0\0\0\5\0", 1, 6, f); /* a score and half a length */
    return fclose(f) == 0;
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    char path[] = "/tmp/gradus-tokbin-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    gd_tokenizer *t = NULL;
    CHECK(write_file(path, 0, 0) && gd_tokenizer_load(ctx, path, &t) == GD_OK, "load: %s", gd_ctx_error(ctx));
    if (t != NULL) {
        CHECK(gd_tokenizer_vocab_size(t) == 268 && gd_tokenizer_eos(t) == 2, "vocab %d, eos %d",
              (int)gd_tokenizer_vocab_size(t), (int)gd_tokenizer_eos(t));
        const char *text = "abc ab \xc3\xa9 x";
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(gd_tokenizer_encode(ctx, t, (const uint8_t *)text, strlen(text), &ids, &n) == GD_OK, "encode: %s",
              gd_ctx_error(ctx));
        /* <s>, the dummy " ", then after the merges "abc" " ab" " " "é" " " and x's byte token */
        const int32_t want[] = {1, 259, 264, 267, 259, 266, 259, 'x' + 3};
        int same = ids != NULL && n == sizeof want / sizeof want[0] && memcmp(ids, want, sizeof want) == 0;
        printf("encode \"%s\": %zu ids:", text, n);
        for (size_t i = 0; i < n; i++) printf(" %d", (int)ids[i]);
        printf("\n");
        CHECK(same, "encode: not run.c's ids");
        uint8_t *back = NULL;
        size_t bl = 0;
        CHECK(gd_tokenizer_decode(ctx, t, ids, n, &back, &bl) == GD_OK && bl == strlen(text) + 1 && back[0] == ' ' &&
                  memcmp(back + 1, text, strlen(text)) == 0,
              "decode: \"%.*s\"", (int)bl, back != NULL ? (const char *)back : "");
        gd_free_mem(back);
        gd_free_mem(ids);
        CHECK(gd_tokenizer_save(ctx, t, "/tmp/never-written.json") == GD_ERR_UNSUPPORTED &&
                  strstr(gd_ctx_error(ctx), "llama2.c") != NULL,
              "saving as tokenizer.json: %s", gd_ctx_error(ctx));
        gd_tokenizer_free(t);
    }
    t = NULL;
    CHECK(write_file(path, 1, 0) && gd_tokenizer_load(ctx, path, &t) == GD_ERR_FORMAT &&
              strstr(gd_ctx_error(ctx), "<0x07>") != NULL && strstr(gd_ctx_error(ctx), path) != NULL,
          "a misplaced byte token: %s", gd_ctx_error(ctx));
    gd_tokenizer_free(t);
    t = NULL;
    CHECK(write_file(path, 0, 1) && gd_tokenizer_load(ctx, path, &t) == GD_ERR_FORMAT &&
              strstr(gd_ctx_error(ctx), "cut short") != NULL,
          "a cut file: %s", gd_ctx_error(ctx));
    gd_tokenizer_free(t);
    unlink(path);
    return tu_finish("test_tokenizer_l2c");
}
