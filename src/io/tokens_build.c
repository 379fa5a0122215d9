/* tokens_build.c — encoding a corpus into a token file (gd_tokens_build; the format is in
 * tokens.h). Files are read one at a time, encoded, and their tokens streamed to a
 * temporary file beside the output, which is renamed over it once complete: a build
 * that fails or is interrupted leaves no half-written token file behind. */
#include "tokens.h"
#include "file_read.h"

#include "alloc.h"
#include "checked.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper than this is a symbolic link that loops rather than a corpus. */
#define WALK_MAX_DEPTH 64

typedef struct flist {
    char **paths;
    size_t n, cap;
    int64_t bytes;
} flist;

static gd_status add_path(gd_ctx *ctx, flist *fl, const char *path, int64_t size)
{
    if (fl->n == fl->cap) {
        size_t cap = fl->cap ? fl->cap * 2 : 64;
        char **p = gd_realloc(fl->paths, cap * sizeof *p);
        if (p == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "token build: out of memory listing files");
        fl->paths = p;
        fl->cap = cap;
    }
    if ((fl->paths[fl->n] = gd_strdup(path)) == NULL)
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "token build: out of memory listing files");
    fl->n++;
    fl->bytes += size;
    return GD_OK;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Adds the regular files under dir, in sorted order, leaving out hidden entries
 * (".git", editor files). */
static gd_status walk(gd_ctx *ctx, flist *fl, const char *dir, int depth)
{
    if (depth > WALK_MAX_DEPTH) return gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: directories nested too deep (a link loop?)", dir);
    DIR *dp = opendir(dir);
    if (dp == NULL) return gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    gd_status st = GD_OK;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **p = gd_realloc(names, ncap * sizeof *p);
            if (p == NULL) {
                st = GD_ERR_NOMEM;
                break;
            }
            names = p;
            cap = ncap;
        }
        if ((names[n] = gd_strdup(e->d_name)) == NULL) {
            st = GD_ERR_NOMEM;
            break;
        }
        n++;
    }
    closedir(dp);
    if (st != GD_OK) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory listing it", dir);
    if (n > 1) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && st == GD_OK; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = gd_malloc(len);
        if (path == NULL) {
            st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "%s: out of memory listing it", dir);
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat sb;
        if (stat(path, &sb) != 0)
            st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            st = walk(ctx, fl, path, depth + 1);
        else if (S_ISREG(sb.st_mode))
            st = add_path(ctx, fl, path, (int64_t)sb.st_size);
        gd_free(path);
    }
    for (size_t i = 0; i < n; i++) gd_free(names[i]);
    gd_free(names);
    return st;
}

/* Tokens on their way to the file, with the running checksum (the buffer is flushed in
 * multiples of 8 bytes, the checksum's word). */
typedef struct writer {
    FILE *f;
    uint8_t buf[1 << 16];
    size_t len;
    uint64_t sum;
    int width, failed;
} writer;

static void flush_words(writer *w, int final)
{
    if (final)
        while (w->len % 8) w->buf[w->len++] = 0;
    size_t whole = w->len & ~(size_t)7;
    w->sum = gd_toksum(w->sum, w->buf, whole);
    if (fwrite(w->buf, 1, whole, w->f) != whole) w->failed = 1;
    memmove(w->buf, w->buf + whole, w->len - whole);
    w->len -= whole;
}

static void put_token(writer *w, int32_t id)
{
    if (w->len + 4 > sizeof w->buf) flush_words(w, 0);
    uint32_t v = (uint32_t)id;
    for (int k = 0; k < w->width; k++) w->buf[w->len++] = (uint8_t)(v >> (8 * k));
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++) p[k] = (uint8_t)(v >> (8 * k));
}

gd_status gd_tokens_build(gd_ctx *ctx, const gd_tokenizer *t, const char *const *paths, int n_paths, const char *out_path,
                          void (*progress)(void *user, int64_t done, int64_t total), void *user,
                          gd_token_file_info *info)
{
    if (info != NULL) memset(info, 0, sizeof *info);
    if (t == NULL || paths == NULL || out_path == NULL || n_paths < 0)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "token build: %s", t == NULL ? "the tokenizer is NULL"
                                                                   : out_path == NULL ? "the output path is NULL"
                                                                                      : "no list of paths");
    flist fl = {0};
    gd_status st = GD_OK;
    for (int i = 0; i < n_paths && st == GD_OK; i++) {
        struct stat sb;
        if (paths[i] == NULL)
            st = gd_ctx_fail(ctx, GD_ERR_INVALID, "token build: path %d is NULL", i);
        else if (stat(paths[i], &sb) != 0)
            st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot open: %s", paths[i], strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            st = walk(ctx, &fl, paths[i], 0);
        else if (S_ISREG(sb.st_mode))
            st = add_path(ctx, &fl, paths[i], (int64_t)sb.st_size);
        else
            st = gd_ctx_fail(ctx, GD_ERR_INVALID, "%s: neither a file nor a directory", paths[i]);
    }
    int32_t vocab = gd_tokenizer_vocab_size(t), eos = gd_tokenizer_eos(t);
    size_t tl = strlen(out_path) + 32;
    char *tmp = NULL;
    FILE *f = NULL;
    writer *w = NULL;
    int64_t *docs = NULL;
    size_t n_docs = 0, cap_docs = 0;
    int64_t n_tokens = 0, done = 0;
    if (st != GD_OK) goto out;
    if (fl.n == 0) {
        st = gd_ctx_fail(ctx, GD_ERR_INVALID, "token build: the corpus is empty (%s%s has no files)", n_paths ? paths[0] : "",
                         n_paths > 1 ? " and the other paths" : "");
        goto out;
    }
    tmp = gd_malloc(tl);
    w = gd_calloc(1, sizeof *w);
    if (tmp == NULL || w == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "token build: out of memory");
        goto out;
    }
    snprintf(tmp, tl, "%s.tmp.%ld", out_path, (long)getpid());
    if ((f = fopen(tmp, "wb")) == NULL) {
        st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    uint8_t header[GD_TOKFILE_HEADER] = {0};
    if (fwrite(header, 1, sizeof header, f) != sizeof header) w->failed = 1;
    w->f = f;
    w->sum = GD_TOKSUM_INIT;
    w->width = vocab <= 65536 ? 2 : 4;
    if (progress != NULL) progress(user, 0, fl.bytes);
    for (size_t i = 0; i < fl.n && st == GD_OK && !w->failed; i++) {
        char *chars;
        size_t n;
        if ((st = gd_read_whole_file(ctx, fl.paths[i], 0, "a document", &chars, &n)) != GD_OK) break;
        uint8_t *text = (uint8_t *)chars;
        if (n > 0) {
            int32_t *ids;
            size_t k;
            st = gd_tokenizer_encode(ctx, t, text, n, &ids, &k);
            if (st != GD_OK) {
                gd_free(text);
                st = gd_ctx_fail(ctx, st, "%s: %s", fl.paths[i], gd_ctx_error(ctx));
                break;
            }
            if (n_docs == cap_docs) {
                size_t ncap = cap_docs ? cap_docs * 2 : 256;
                int64_t *p = gd_realloc(docs, ncap * sizeof *p);
                if (p == NULL) {
                    gd_free(ids);
                    gd_free(text);
                    st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "token build: out of memory");
                    break;
                }
                docs = p;
                cap_docs = ncap;
            }
            docs[n_docs++] = n_tokens;
            for (size_t j = 0; j < k; j++) put_token(w, ids[j]);
            if (eos >= 0) put_token(w, eos);
            n_tokens += (int64_t)k + (eos >= 0);
            gd_free(ids);
        }
        gd_free(text);
        done += (int64_t)n;
        if (progress != NULL) progress(user, done, fl.bytes);
    }
    if (st != GD_OK) goto out;
    if (n_docs == 0) {
        st = gd_ctx_fail(ctx, GD_ERR_INVALID, "token build: the corpus is empty (%zu file%s, all empty)", fl.n,
                         fl.n == 1 ? "" : "s");
        goto out;
    }
    flush_words(w, 1);
    uint64_t data_sum = w->sum, table_sum = GD_TOKSUM_INIT;
    for (size_t i = 0; i <= n_docs; i++) {
        uint8_t b[8];
        put_le(b, i < n_docs ? (uint64_t)docs[i] : (uint64_t)n_tokens, 8);
        table_sum = gd_toksum(table_sum, b, 8);
        if (fwrite(b, 1, 8, f) != 8) w->failed = 1;
    }
    memcpy(header, GD_TOKFILE_MAGIC, 8);
    put_le(header + 8, GD_TOKFILE_VERSION, 4);
    put_le(header + 12, (uint64_t)w->width, 4);
    put_le(header + 16, (uint64_t)vocab, 4);
    put_le(header + 20, eos >= 0 ? (uint64_t)eos : 0xFFFFFFFFu, 4);
    put_le(header + 24, (uint64_t)n_tokens, 8);
    put_le(header + 32, n_docs, 8);
    put_le(header + 40, data_sum, 8);
    put_le(header + 48, table_sum, 8);
    put_le(header + 56, gd_toksum(GD_TOKSUM_INIT, header, 56), 8);
    if (fseek(f, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, f) != sizeof header || fflush(f) != 0 ||
        fsync(fileno(f)) != 0)
        w->failed = 1;
    if (w->failed) {
        st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    if (fclose(f) != 0) {
        f = NULL;
        st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    f = NULL;
    if (rename(tmp, out_path) != 0) {
        st = gd_ctx_fail(ctx, GD_ERR_IO, "%s: cannot rename into place: %s", out_path, strerror(errno));
        goto out;
    }
    if (info != NULL) {
        info->documents = (int64_t)n_docs;
        info->bytes = done;
        info->tokens = n_tokens;
    }
out:
    if (f != NULL) fclose(f);
    if (st != GD_OK && tmp != NULL) remove(tmp);
    gd_free(tmp);
    gd_free(w);
    gd_free(docs);
    for (size_t i = 0; i < fl.n; i++) gd_free(fl.paths[i]);
    gd_free(fl.paths);
    return st;
}
